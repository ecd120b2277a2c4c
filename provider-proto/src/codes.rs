//! Machine error codes (docs/behaviour.md#error-codes) and the upstream error-string format (docs/behaviour.md#error-encoding).
//!
//! Go providers and Go-compatible logs render a driver error as
//! `machine codes error: code = [<CodeName>] message = [<message>]`, and upstream decodes any error
//! text by looking for exactly two top-level bracket groups. Both directions are reproduced here so
//! `status.lastOperation` texts and logs read the same as upstream.

use std::fmt;

/// A machine error code: gRPC's codes 0..=16 plus `Uninitialized` (17).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    /// 0: not an error.
    Ok,
    /// 1: the operation was cancelled (typically by the caller).
    Canceled,
    /// 2: unknown error (also: an error text that could not be decoded).
    Unknown,
    /// 3: the request is invalid regardless of the system state (bad providerSpec...).
    InvalidArgument,
    /// 4: the deadline expired before the operation completed.
    DeadlineExceeded,
    /// 5: the VM does not exist.
    NotFound,
    /// 6: the object already exists.
    AlreadyExists,
    /// 7: the caller may not do this.
    PermissionDenied,
    /// 8: quota or capacity exhausted (the controller retries with `--resource-exhausted-retry`).
    ResourceExhausted,
    /// 9: the system is not in a state required for the operation.
    FailedPrecondition,
    /// 10: the operation was aborted (concurrency conflict...).
    Aborted,
    /// 11: out of range; in a GetMachineStatus answer: several VMs back one machine.
    OutOfRange,
    /// 12: the method is not implemented by the provider.
    Unimplemented,
    /// 13: internal provider error.
    Internal,
    /// 14: the cloud is temporarily unavailable.
    Unavailable,
    /// 15: unrecoverable data loss.
    DataLoss,
    /// 16: the credentials are missing or invalid.
    Unauthenticated,
    /// 17: the VM exists but InitializeMachine has not completed (not a gRPC code).
    Uninitialized,
}

impl Code {
    /// Every code, in numeric order.
    pub const ALL: [Code; 18] = [
        Code::Ok,
        Code::Canceled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
        Code::Uninitialized,
    ];

    /// The numeric value (0..=17).
    pub fn value(self) -> i32 {
        self as i32
    }

    /// The code with this numeric value, `None` outside 0..=17.
    pub fn from_value(value: i32) -> Option<Code> {
        usize::try_from(value)
            .ok()
            .and_then(|index| Code::ALL.get(index).copied())
    }

    /// The upstream CamelCase name (`Code.String()` in Go).
    pub fn name(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::Canceled => "Canceled",
            Code::Unknown => "Unknown",
            Code::InvalidArgument => "InvalidArgument",
            Code::DeadlineExceeded => "DeadlineExceeded",
            Code::NotFound => "NotFound",
            Code::AlreadyExists => "AlreadyExists",
            Code::PermissionDenied => "PermissionDenied",
            Code::ResourceExhausted => "ResourceExhausted",
            Code::FailedPrecondition => "FailedPrecondition",
            Code::Aborted => "Aborted",
            Code::OutOfRange => "OutOfRange",
            Code::Unimplemented => "Unimplemented",
            Code::Internal => "Internal",
            Code::Unavailable => "Unavailable",
            Code::DataLoss => "DataLoss",
            Code::Unauthenticated => "Unauthenticated",
            Code::Uninitialized => "Uninitialized",
        }
    }

    /// Upstream `StringToCode`: unknown names map to `Unknown`.
    pub fn from_name(name: &str) -> Code {
        Code::ALL
            .into_iter()
            .find(|code| code.name() == name)
            .unwrap_or(Code::Unknown)
    }

    /// The gRPC status code used on the wire. `Uninitialized` has no gRPC code and travels as
    /// `FailedPrecondition` plus a [`crate::pb::v1::MachineErrorDetail`]; `Ok` is never an error
    /// status in gRPC, so an error that carries it travels as `Unknown` plus the detail.
    #[cfg(feature = "grpc")]
    pub fn to_grpc(self) -> tonic::Code {
        match self {
            Code::Ok => tonic::Code::Unknown,
            Code::Uninitialized => tonic::Code::FailedPrecondition,
            other => tonic::Code::from_i32(other.value()),
        }
    }

    /// The machine code with the same number as a gRPC code (a plain status maps to its own code).
    #[cfg(feature = "grpc")]
    pub fn from_grpc(code: tonic::Code) -> Code {
        Code::from_value(code as i32).unwrap_or(Code::Unknown)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Upstream `Code.String()` for any number: the name, or `Code(<n>)` outside the table.
pub fn code_name(value: i32) -> String {
    match Code::from_value(value) {
        Some(code) => code.name().to_owned(),
        None => format!("Code({value})"),
    }
}

/// The upstream error string of a machine error:
/// `machine codes error: code = [<CodeName>] message = [<message>]`.
pub fn format_machine_error(code: Code, message: &str) -> String {
    format!(
        "machine codes error: code = [{}] message = [{message}]",
        code.name()
    )
}

/// The result of decoding an error text the way upstream `status.FromError` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedError {
    /// The code named in the first bracket group (`Unknown` if undecodable or unknown name).
    pub code: Code,
    /// The second bracket group, or the whole text when undecodable.
    pub message: String,
    /// Whether the text had exactly two balanced top-level bracket groups.
    pub decodable: bool,
}

/// Decodes an error text like upstream `status.FromError`: it succeeds only if the text has exactly
/// two top-level `[...]` groups (brackets nested inside a group are kept); the first is the code
/// name, the second the message. Anything else (other group counts, unbalanced `[`) is undecodable
/// and yields `Unknown` with the whole text.
pub fn decode_machine_error(text: &str) -> DecodedError {
    match top_level_bracket_groups(text) {
        Some(groups) if groups.len() == 2 => DecodedError {
            code: Code::from_name(&groups[0]),
            message: groups[1].clone(),
            decodable: true,
        },
        _ => DecodedError {
            code: Code::Unknown,
            message: text.to_owned(),
            decodable: false,
        },
    }
}

/// The contents of the top-level bracket groups, `None` when a `[` is never closed. A `]` without
/// an open group is ignored, as upstream does.
fn top_level_bracket_groups(text: &str) -> Option<Vec<String>> {
    let mut groups = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    for character in text.chars() {
        match character {
            '[' => {
                if depth > 0 {
                    current.push(character);
                }
                depth += 1;
            }
            ']' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    groups.push(std::mem::take(&mut current));
                } else {
                    current.push(character);
                }
            }
            _ if depth > 0 => current.push(character),
            _ => {}
        }
    }
    (depth == 0).then_some(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_names_follow_the_upstream_table() {
        let table = [
            (0, "OK"),
            (1, "Canceled"),
            (2, "Unknown"),
            (3, "InvalidArgument"),
            (4, "DeadlineExceeded"),
            (5, "NotFound"),
            (6, "AlreadyExists"),
            (7, "PermissionDenied"),
            (8, "ResourceExhausted"),
            (9, "FailedPrecondition"),
            (10, "Aborted"),
            (11, "OutOfRange"),
            (12, "Unimplemented"),
            (13, "Internal"),
            (14, "Unavailable"),
            (15, "DataLoss"),
            (16, "Unauthenticated"),
            (17, "Uninitialized"),
        ];
        for (value, name) in table {
            let code = Code::from_value(value).unwrap();
            assert_eq!(code.value(), value);
            assert_eq!(code.name(), name);
            assert_eq!(Code::from_name(name), code);
            assert_eq!(code_name(value), name);
        }
        assert_eq!(Code::from_value(18), None);
        assert_eq!(Code::from_value(-1), None);
        assert_eq!(code_name(42), "Code(42)");
        assert_eq!(Code::from_name("NoSuchCode"), Code::Unknown);
        assert_eq!(
            Code::from_name("notfound"),
            Code::Unknown,
            "names are case-sensitive"
        );
    }

    #[cfg(feature = "grpc")]
    #[test]
    fn grpc_codes_map_to_the_same_number_except_ok_and_uninitialized() {
        assert_eq!(Code::NotFound.to_grpc(), tonic::Code::NotFound);
        assert_eq!(
            Code::Unauthenticated.to_grpc(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(
            Code::Uninitialized.to_grpc(),
            tonic::Code::FailedPrecondition
        );
        assert_eq!(Code::Ok.to_grpc(), tonic::Code::Unknown);
        assert_eq!(
            Code::from_grpc(tonic::Code::ResourceExhausted),
            Code::ResourceExhausted
        );
        assert_eq!(Code::from_grpc(tonic::Code::Cancelled), Code::Canceled);
    }

    #[test]
    fn formats_the_upstream_error_string() {
        assert_eq!(
            format_machine_error(Code::ResourceExhausted, "quota exceeded for m5.large"),
            "machine codes error: code = [ResourceExhausted] message = [quota exceeded for m5.large]"
        );
    }

    #[test]
    fn decodes_what_it_formats_including_nested_brackets() {
        let text = format_machine_error(Code::Internal, "list [a [b]] failed");
        let decoded = decode_machine_error(&text);
        assert!(decoded.decodable);
        assert_eq!(decoded.code, Code::Internal);
        assert_eq!(decoded.message, "list [a [b]] failed");
    }

    #[test]
    fn decodes_through_a_wrapping_text_without_brackets() {
        let text = format!(
            "creating VM: {}",
            format_machine_error(Code::Unavailable, "try later")
        );
        let decoded = decode_machine_error(&text);
        assert_eq!(
            (decoded.code, decoded.message.as_str(), decoded.decodable),
            (Code::Unavailable, "try later", true)
        );
    }

    #[test]
    fn extra_top_level_groups_make_it_undecodable() {
        let text = format!("[ctx] {}", format_machine_error(Code::NotFound, "gone"));
        let decoded = decode_machine_error(&text);
        assert!(!decoded.decodable);
        assert_eq!(decoded.code, Code::Unknown);
        assert_eq!(decoded.message, text);
    }

    #[test]
    fn unbalanced_or_missing_brackets_are_undecodable() {
        for text in [
            "machine codes error: code = [NotFound] message = [gone",
            "plain error without groups",
            "only [one] group",
        ] {
            let decoded = decode_machine_error(text);
            assert!(!decoded.decodable, "{text}");
            assert_eq!(decoded.code, Code::Unknown);
        }
    }

    #[test]
    fn unknown_code_name_decodes_as_unknown_but_is_decodable() {
        let decoded = decode_machine_error("code = [Weird] message = [m]");
        assert!(decoded.decodable);
        assert_eq!(decoded.code, Code::Unknown);
        assert_eq!(decoded.message, "m");
    }

    #[test]
    fn stray_closing_bracket_outside_a_group_is_ignored() {
        let decoded = decode_machine_error("x] code = [Aborted] message = [m]");
        assert!(decoded.decodable);
        assert_eq!(decoded.code, Code::Aborted);
    }
}
