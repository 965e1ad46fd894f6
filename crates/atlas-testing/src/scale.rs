//! How hard the tests push, as one knob: every property test takes its case count, and every
//! heavy test its size, from here. `ATLAS_TEST_SCALE` multiplies both (1 by default, as CI
//! runs; `cargo xtask ci --long` sets 4, for before a release); `PROPTEST_CASES`, when set,
//! still names the exact case count of every property test, as proptest users expect.

use proptest::test_runner::Config;

/// The multiplier `ATLAS_TEST_SCALE` sets (a whole number from 1), 1 when unset.
///
/// # Panics
/// When the variable holds anything but a whole number from 1: a mistyped knob must not
/// silently run the default.
pub fn scale() -> u32 {
    match std::env::var("ATLAS_TEST_SCALE") {
        Err(_) => 1,
        Ok(value) => parse_scale(&value).unwrap_or_else(|why| panic!("ATLAS_TEST_SCALE={value:?}: {why}")),
    }
}

fn parse_scale(value: &str) -> Result<u32, String> {
    match value.trim().parse::<u32>() {
        Ok(0) => Err("the scale starts at 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("expected a whole number from 1 (1 as in CI, 4 for `cargo xtask ci --long`)".into()),
    }
}

/// The case count of a property test whose default is `default`: `PROPTEST_CASES` when set,
/// else `default` times the scale.
pub fn cases(default: u32) -> u32 {
    if let Some(exact) = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.trim().parse().ok()) {
        return exact;
    }
    default.saturating_mul(scale())
}

/// A proptest configuration of [`cases`]`(default)` cases, the rest proptest's own defaults.
pub fn proptest_config(default: u32) -> Config {
    Config { cases: cases(default), ..Config::default() }
}

/// The size of a heavy test's input (lines imported, memories written) whose default is
/// `default`: `default` times the scale.
pub fn size(default: usize) -> usize {
    default.saturating_mul(scale() as usize)
}

#[cfg(test)]
mod tests {
    use super::parse_scale;

    #[test]
    fn the_scale_is_a_whole_number_from_one() {
        assert_eq!(parse_scale("1"), Ok(1));
        assert_eq!(parse_scale(" 4 "), Ok(4));
        assert!(parse_scale("0").is_err());
        assert!(parse_scale("-1").is_err());
        assert!(parse_scale("x4").unwrap_err().contains("whole number"));
    }
}
