//! The complete tests docs/testing.md shows, one file each, verbatim, so they
//! compile and run; `the_guide_shows_these_files` fails when a page's block and
//! its file differ.

mod failed_send_retried;
mod placing_an_order;

/// The page's blocks holding a `#[tokio::test]`, in page order, and the files
/// that must hold the same text.
#[test]
fn the_guide_shows_these_files() {
    let page = include_str!("../../../../docs/testing.md");
    let files = [
        include_str!("placing_an_order.rs"),
        include_str!("failed_send_retried.rs"),
    ];
    let shown: Vec<&str> = page
        .split("```rust")
        .skip(1)
        .filter_map(|block| block.split_once('\n'))
        .map(|(_, rest)| rest.split("```").next().unwrap_or(""))
        .filter(|code| code.contains("#[tokio::test"))
        .collect();
    assert_eq!(shown, files, "docs/testing.md and tests/guide/ differ");
}
