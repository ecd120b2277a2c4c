//! The checker on small fixture crates written to a temporary directory.

use std::path::Path;

use crate::{Analysis, Target, analyze, circle_report, discover};

/// Writes `files` (paths relative to the crate directory) and analyses its `src/lib.rs`.
fn analyse(files: &[(&str, &str)]) -> Analysis {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), files);
    analyze(&Target {
        crate_dir: "fx".to_owned(),
        kind: "lib".to_owned(),
        root_file: dir.path().join("src/lib.rs"),
    })
    .unwrap()
}

fn write(root: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

/// File-level edges as `from -> to:line`, sorted.
fn file_edges(analysis: &Analysis) -> Vec<String> {
    let graph = &analysis.files;
    graph
        .edges
        .iter()
        .map(|((from, to), site)| {
            format!(
                "{} -> {}:{}",
                graph.labels[*from], graph.labels[*to], site.line
            )
        })
        .collect()
}

/// File-level circles as label lists.
fn file_circles(analysis: &Analysis) -> Vec<Vec<String>> {
    let graph = &analysis.files;
    graph
        .circles()
        .into_iter()
        .map(|circle| circle.iter().map(|n| graph.labels[*n].clone()).collect())
        .collect()
}

fn folder_circles(analysis: &Analysis) -> Vec<Vec<String>> {
    let graph = &analysis.folders;
    graph
        .circles()
        .into_iter()
        .map(|circle| circle.iter().map(|n| graph.labels[*n].clone()).collect())
        .collect()
}

#[test]
fn a_two_file_cycle_is_found() {
    let analysis = analyse(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a.rs", "use crate::b::B;\npub struct A(B);\n"),
        (
            "src/b.rs",
            "pub struct B;\npub fn make() -> crate::a::A { todo() }\n",
        ),
    ]);
    assert_eq!(file_circles(&analysis), vec![vec!["a.rs", "b.rs"]]);
    assert_eq!(
        file_edges(&analysis),
        vec!["a.rs -> b.rs:1", "b.rs -> a.rs:2"]
    );
    assert!(analysis.has_circles());
}

#[test]
fn a_three_file_cycle_is_reported_with_the_line_of_each_edge() {
    let analysis = analyse(&[
        ("src/lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("src/a.rs", "//! A.\n\nuse crate::b::B;\npub struct A;\n"),
        (
            "src/b.rs",
            "pub struct B;\n\n\n\nfn f() { let _ = crate::c::C; }\n",
        ),
        ("src/c.rs", "pub struct C;\nuse crate::a::A;\n"),
    ]);
    assert_eq!(file_circles(&analysis), vec![vec!["a.rs", "b.rs", "c.rs"]]);
    let report = circle_report(&analysis).join("\n");
    assert!(
        report.contains("fx (lib): circle between 3 file modules: a.rs, b.rs, c.rs"),
        "{report}"
    );
    assert!(report.contains("a.rs -> b.rs  (fx/src/a.rs:3)"), "{report}");
    assert!(report.contains("b.rs -> c.rs  (fx/src/b.rs:5)"), "{report}");
    assert!(report.contains("c.rs -> a.rs  (fx/src/c.rs:2)"), "{report}");
}

#[test]
fn super_self_and_grouped_uses_are_resolved_to_their_files() {
    let analysis = analyse(&[
        ("src/lib.rs", "mod a;\nmod b;\nmod top;\n"),
        ("src/top.rs", "pub struct Top;\n"),
        ("src/a.rs", "mod x;\nmod y;\n"),
        (
            "src/a/x.rs",
            "use super::y::{self as why, Y};\nuse self::inner::I;\nmod inner { pub struct I; }\n",
        ),
        ("src/a/y.rs", "pub struct Y;\n"),
        ("src/b.rs", "pub mod c;\npub struct B;\n"),
        (
            "src/b/c.rs",
            "use crate::{top::Top, b::{B, c::C as Alias}};\npub struct C;\n",
        ),
    ]);
    assert_eq!(
        file_edges(&analysis),
        vec![
            "a/x.rs -> a/y.rs:1",
            "b/c.rs -> b.rs:1",
            "b/c.rs -> top.rs:1"
        ]
    );
    assert!(file_circles(&analysis).is_empty());
}

#[test]
fn a_re_export_is_an_edge_and_a_path_through_it_reaches_the_defining_file() {
    let analysis = analyse(&[
        (
            "src/lib.rs",
            "mod codes;\nmod user;\npub use codes::Code;\n",
        ),
        ("src/codes.rs", "pub enum Code { A }\n"),
        (
            "src/user.rs",
            "use crate::Code;\nfn f() -> Code { crate::Code::A }\n",
        ),
    ]);
    assert_eq!(
        file_edges(&analysis),
        vec!["lib.rs -> codes.rs:3", "user.rs -> codes.rs:1"]
    );
    assert!(!analysis.has_circles());
}

#[test]
fn a_child_using_its_parent_is_fine_and_mod_declarations_are_no_edges() {
    let analysis = analyse(&[
        ("src/lib.rs", "mod a;\n"),
        (
            "src/a.rs",
            "mod child;\n#[cfg(test)]\nmod tests;\npub struct P;\n",
        ),
        ("src/a/child.rs", "use super::P;\n"),
        (
            "src/a/tests.rs",
            "use super::*;\n#[test]\nfn t() { let _ = P; }\n",
        ),
    ]);
    assert_eq!(
        file_edges(&analysis),
        vec!["a/child.rs -> a.rs:1", "a/tests.rs -> a.rs:1"]
    );
    assert!(!analysis.has_circles());
}

#[test]
fn a_parent_re_exporting_a_child_that_uses_it_is_a_circle() {
    let analysis = analyse(&[
        ("src/lib.rs", "mod a;\n"),
        (
            "src/a/mod.rs",
            "mod child;\npub use child::C;\npub struct P;\n",
        ),
        ("src/a/child.rs", "pub struct C(super::P);\n"),
    ]);
    assert_eq!(
        file_circles(&analysis),
        vec![vec!["a/child.rs", "a/mod.rs"]]
    );
    // Both files are the folder `a/`: no folder circle.
    assert!(folder_circles(&analysis).is_empty());
}

#[test]
fn a_folder_cycle_is_found_where_the_files_have_none() {
    let analysis = analyse(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a.rs", "mod a1;\nmod a2;\n"),
        ("src/a/a1.rs", "use crate::b::b1::X;\n"),
        ("src/a/a2.rs", "pub struct Y;\n"),
        ("src/b.rs", "pub mod b1;\nmod b2;\n"),
        ("src/b/b1.rs", "pub struct X;\n"),
        ("src/b/b2.rs", "fn f() -> crate::a::a2::Y { todo() }\n"),
    ]);
    assert!(file_circles(&analysis).is_empty());
    assert_eq!(folder_circles(&analysis), vec![vec!["a/", "b/"]]);
    let report = circle_report(&analysis).join("\n");
    assert!(
        report.contains("circle between 2 folders: a/, b/"),
        "{report}"
    );
    assert!(report.contains("(fx/src/a/a1.rs:1)"), "{report}");
    assert!(report.contains("(fx/src/b/b2.rs:1)"), "{report}");
}

#[test]
fn edges_the_printed_cycles_leave_out_are_listed() {
    // a <-> b and b <-> c: the shortest cycles through a and through c use four edges, but
    // a -> c is in neither and must be listed too.
    let analysis = analyse(&[
        ("src/lib.rs", "mod a;\nmod b;\nmod c;\n"),
        (
            "src/a.rs",
            "use crate::b::B;\nuse crate::c::C;\npub struct A;\n",
        ),
        (
            "src/b.rs",
            "use crate::a::A;\nuse crate::c::C;\npub struct B;\n",
        ),
        ("src/c.rs", "use crate::b::B;\npub struct C;\n"),
    ]);
    let report = circle_report(&analysis).join("\n");
    assert!(report.contains("every edge inside the circle:"), "{report}");
    assert!(report.contains("a.rs -> c.rs  (fx/src/a.rs:2)"), "{report}");
}

#[test]
fn path_attribute_and_inline_modules_find_their_files() {
    let analysis = analyse(&[
        (
            "src/lib.rs",
            "#[path = \"elsewhere/place.rs\"]\nmod p;\nmod q;\nmod outer {\n    pub mod inner;\n}\n",
        ),
        (
            "src/elsewhere/place.rs",
            "use crate::q::Q;\npub struct P;\n",
        ),
        ("src/q.rs", "use crate::p::P;\npub struct Q;\n"),
        (
            "src/outer/inner.rs",
            "pub fn f() -> crate::q::Q { todo() }\n",
        ),
    ]);
    assert!(analysis.warnings.is_empty(), "{:?}", analysis.warnings);
    assert_eq!(
        file_circles(&analysis),
        vec![vec!["elsewhere/place.rs", "q.rs"]]
    );
    assert!(file_edges(&analysis).contains(&"outer/inner.rs -> q.rs:1".to_owned()));
}

#[test]
fn paths_in_macros_count_and_external_paths_do_not() {
    let analysis = analyse(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        (
            "src/a.rs",
            "use std::fmt;\nuse serde::Serialize;\nfn t() {\n    assert_eq!(crate::b::one(), 1);\n}\n",
        ),
        ("src/b.rs", "pub fn one() -> u8 { 1 }\n"),
    ]);
    assert_eq!(file_edges(&analysis), vec!["a.rs -> b.rs:4"]);
}

#[test]
fn a_missing_module_file_is_a_warning_not_a_failure() {
    let analysis = analyse(&[("src/lib.rs", "#[cfg(windows)]\nmod windows_only;\n")]);
    assert_eq!(analysis.warnings.len(), 1);
    assert!(analysis.warnings[0].contains("windows_only"));
}

#[test]
fn discover_lists_library_and_binaries_of_each_member() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        &[
            (
                "Cargo.toml",
                "[workspace]\nmembers = [\n    \"one\", # a comment\n    \"tools/two\",\n]\n",
            ),
            ("one/src/lib.rs", ""),
            ("one/src/bin/extra.rs", "fn main() {}\n"),
            ("tools/two/src/main.rs", "fn main() {}\n"),
        ],
    );
    let targets: Vec<(String, String)> = discover(dir.path())
        .unwrap()
        .into_iter()
        .map(|target| (target.crate_dir, target.kind))
        .collect();
    assert_eq!(
        targets,
        vec![
            ("one".to_owned(), "lib".to_owned()),
            ("one".to_owned(), "bin extra".to_owned()),
            ("tools/two".to_owned(), "bin".to_owned()),
        ]
    );
}

#[test]
fn a_syntax_error_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        &[("src/lib.rs", "mod a;\n"), ("src/a.rs", "fn (\n")],
    );
    let error = analyze(&Target {
        crate_dir: "fx".to_owned(),
        kind: "lib".to_owned(),
        root_file: dir.path().join("src/lib.rs"),
    })
    .unwrap_err();
    assert!(error.to_string().contains("a.rs:1"), "{error}");
}
