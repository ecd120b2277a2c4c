//! Where request heads start and end in the bytes read ([`HeadScanner`], pure).

/// Finds where request heads start and end in the bytes a server reads (HTTP/1.1, one request
/// at a time): a head starts with the first byte read after a response was written (or on a new
/// connection) and ends with the blank line `\r\n\r\n`. Pure: no I/O, no clock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeadScanner {
    /// A head has started and its end has not been seen.
    in_head: bool,
    /// The head of the current request has been read (its body may follow).
    in_request: bool,
    /// The last four bytes of the head so far, to find `\r\n\r\n` across reads.
    window: u32,
}

/// What one read changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadChange {
    /// Nothing about heads.
    None,
    /// A head started and is not complete yet.
    Started,
    /// The head in progress (or one that started and ended in this read) is complete.
    Completed,
}

impl HeadScanner {
    /// Feeds bytes that were read.
    pub fn on_read(&mut self, bytes: &[u8]) -> HeadChange {
        if bytes.is_empty() || self.in_request {
            return HeadChange::None;
        }
        let started = !self.in_head;
        self.in_head = true;
        for byte in bytes {
            self.window = (self.window << 8) | u32::from(*byte);
            if self.window == u32::from_be_bytes(*b"\r\n\r\n") {
                self.in_head = false;
                self.in_request = true;
                self.window = 0;
                return HeadChange::Completed;
            }
        }
        if started {
            HeadChange::Started
        } else {
            HeadChange::None
        }
    }

    /// Notes that bytes were written: a response, so the next byte read starts a new request.
    pub fn on_write(&mut self) {
        if self.in_request {
            self.in_request = false;
            self.window = 0;
        }
    }
}
