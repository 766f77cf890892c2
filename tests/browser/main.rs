//! The live page in a real browser (headless Chromium through `chromedriver`, which `scripts/test`
//! installs).

#[cfg(feature = "sim")]
#[path = "../common/mod.rs"]
mod common;

mod browser;
