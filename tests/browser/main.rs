//! The live page in a real browser (headless Chromium through `chromedriver`, which `scripts/test`
//! installs), and in Chromium's `--dump-dom` with a virtual time budget.

#[cfg(feature = "sim")]
#[path = "../common/mod.rs"]
mod common;

mod browser;
mod virtual_time;
