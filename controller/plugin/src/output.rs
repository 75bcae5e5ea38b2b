//! Output as kubectl prints it: aligned columns with upper-case headers (`-o table`), or the
//! same rows as JSON or YAML for scripts.

use std::io::Write;

use serde::Serialize;

use crate::cli::Output;
use crate::error::{Error, Result};

/// Prints `value` as JSON or YAML; `table` renders the table form.
pub fn print<T: Serialize>(
    out: &mut dyn Write,
    format: Output,
    value: &T,
    table: impl FnOnce() -> String,
) -> Result<()> {
    let text = match format {
        Output::Table => table(),
        Output::Json => {
            let mut s =
                serde_json::to_string_pretty(value).map_err(|e| Error::Output(e.to_string()))?;
            s.push('\n');
            s
        }
        Output::Yaml => serde_yaml::to_string(value).map_err(|e| Error::Output(e.to_string()))?,
    };
    out.write_all(text.as_bytes())
        .map_err(|e| Error::Output(e.to_string()))
}

/// Aligned columns, three spaces apart as kubectl's; empty cells stay empty. Each line ends
/// without trailing blanks.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let mut s = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut l = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                l.push_str("   ");
            }
            l.push_str(cell);
            let pad = widths[i].saturating_sub(cell.chars().count());
            l.extend(std::iter::repeat_n(' ', pad));
        }
        s.push_str(l.trim_end());
        s.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_three_spaces_apart_without_trailing_blanks() {
        let t = table(
            &["NAME", "HELD BY", "UNTIL"],
            &[
                vec!["ec2.web".into(), "alice".into(), "".into()],
                vec!["rds.reporting-db".into(), "".into(), "".into()],
            ],
        );
        assert_eq!(
            t,
            "NAME               HELD BY   UNTIL\nec2.web            alice\nrds.reporting-db\n"
        );
    }
}
