//! kubectl-style plain tables (upper-case headers, columns padded and separated by three spaces)
//! and kubectl-style ages (`45s`, `3m12s`, `5h`, `2d4h`).

/// Renders `rows` under `headers`, every column as wide as its widest cell, no trailing spaces.
#[must_use]
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(width) = widths.get_mut(i) {
                *width = (*width).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut text = String::new();
        for (i, cell) in cells.into_iter().enumerate() {
            text.push_str(cell);
            if i < last {
                let pad = widths[i].saturating_sub(cell.chars().count()) + 3;
                text.push_str(&" ".repeat(pad));
            }
        }
        text.trim_end().to_owned()
    };
    let mut out = line(headers.to_vec());
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

/// A duration as kubectl prints ages: seconds below 2 minutes, minutes and seconds below 10
/// minutes, minutes below 3 hours, hours and minutes below 8 hours, hours below 2 days, days and
/// hours below 8 days, days after. Negative durations (clock skew) print as `0s`.
#[must_use]
pub fn age(seconds: i64) -> String {
    let s = seconds.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86_400);
    match s {
        _ if s < 120 => format!("{s}s"),
        _ if m < 10 => format!("{m}m{}s", s % 60).replace("m0s", "m"),
        _ if h < 3 => format!("{m}m"),
        _ if h < 8 => format!("{h}h{}m", m % 60).replace("h0m", "h"),
        _ if d < 2 => format!("{h}h"),
        _ if d < 8 => format!("{d}d{}h", h % 24).replace("d0h", "d"),
        _ => format!("{d}d"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn columns_line_up_and_lines_have_no_trailing_space() {
        let text = render(
            &["NAME", "PHASE"],
            &[
                vec!["a-very-long-name".to_owned(), "Running".to_owned()],
                vec!["b".to_owned(), String::new()],
            ],
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        let column = lines[0].find("PHASE").unwrap_or(0);
        assert_eq!(lines[1].find("Running"), Some(column));
        assert_eq!(column, "a-very-long-name".len() + 3);
        assert!(lines.iter().all(|l| !l.ends_with(' ')));
    }

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(age(-5), "0s");
        assert_eq!(age(59), "59s");
        assert_eq!(age(119), "119s");
        assert_eq!(age(192), "3m12s");
        assert_eq!(age(180), "3m");
        assert_eq!(age(45 * 60), "45m");
        assert_eq!(age(5 * 3600 + 7 * 60), "5h7m");
        assert_eq!(age(20 * 3600), "20h");
        assert_eq!(age(2 * 86_400 + 4 * 3600), "2d4h");
        assert_eq!(age(30 * 86_400), "30d");
    }

    proptest! {
        #[test]
        fn ages_never_grow_shorter_in_their_leading_unit(a in 0i64..10_000_000, b in 0i64..10_000_000) {
            // The leading number and unit of an older age are never smaller than a younger one's.
            let rank = |t: &str| {
                let digits: String = t.chars().take_while(char::is_ascii_digit).collect();
                let unit = t.chars().find(|c| c.is_ascii_alphabetic()).unwrap_or('s');
                let factor: i64 = match unit { 's' => 1, 'm' => 60, 'h' => 3600, _ => 86_400 };
                digits.parse::<i64>().unwrap_or(0) * factor
            };
            let (young, old) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(rank(&age(young)) <= rank(&age(old)), "{} vs {}", age(young), age(old));
        }
    }
}
