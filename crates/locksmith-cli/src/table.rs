//! Text tables as `locksmith status` and `locksmith cluster status` print them.

/// Prints `header` and `rows` in columns two spaces apart, each as wide as its widest cell (in
/// characters); a column is right-aligned where `right_aligned` says so (numbers), otherwise
/// left-aligned. Trailing spaces are trimmed.
pub(crate) fn print_table<R: AsRef<[String]>>(header: &[&str], rows: &[R], right_aligned: impl Fn(usize) -> bool) {
    print!("{}", render_table(header, rows, right_aligned));
}

/// The table [`print_table`] prints, each line ending in a newline.
pub(crate) fn render_table<R: AsRef<[String]>>(
    header: &[&str],
    rows: &[R],
    right_aligned: impl Fn(usize) -> bool,
) -> String {
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, cell) in widths.iter_mut().zip(r.as_ref()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for r in std::iter::once(header.as_slice()).chain(rows.iter().map(AsRef::as_ref)) {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, &w))| if right_aligned(i) { format!("{cell:>w$}") } else { format!("{cell:<w$}") })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// `-` for a value the backend cannot tell (or does not know yet).
pub(crate) fn or_dash(v: Option<impl ToString>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}
