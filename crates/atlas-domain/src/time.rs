//! Timestamps: milliseconds since the Unix epoch, UTC, rendered as RFC 3339.

use ::time::OffsetDateTime;
use ::time::format_description::well_known::Rfc3339;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A point in time with millisecond precision. The domain never reads the clock: callers pass
/// "now" in, which keeps every policy deterministic and testable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

impl Timestamp {
    pub const MIN: Timestamp = Timestamp(i64::MIN);
    pub const MAX: Timestamp = Timestamp(i64::MAX);

    pub fn from_millis(ms: i64) -> Self {
        Timestamp(ms)
    }

    pub fn millis(self) -> i64 {
        self.0
    }

    /// Parses RFC 3339 (`2023-05-08T13:56:00Z`, offsets allowed) or a bare date (`2023-05-08`,
    /// taken as midnight UTC).
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        if let Ok(dt) = OffsetDateTime::parse(t, &Rfc3339) {
            return Ok(Self::from_datetime(dt));
        }
        if let Some(dt) = date_only(t) {
            return Ok(Self::from_datetime(dt));
        }
        Err(format!("expected an RFC 3339 time such as 2024-05-08T13:56:00Z, got {text:?}"))
    }

    fn from_datetime(dt: OffsetDateTime) -> Self {
        Timestamp((dt.unix_timestamp_nanos() / 1_000_000) as i64)
    }

    pub fn to_rfc3339(self) -> String {
        let nanos = i128::from(self.0) * 1_000_000;
        match OffsetDateTime::from_unix_timestamp_nanos(nanos) {
            Ok(dt) => dt.format(&Rfc3339).unwrap_or_else(|_| self.0.to_string()),
            Err(_) => self.0.to_string(),
        }
    }
}

/// `YYYY-MM-DD` as midnight UTC; `None` for anything else.
fn date_only(text: &str) -> Option<OffsetDateTime> {
    let mut parts = text.splitn(3, '-');
    let year: i32 = parts.next()?.parse().ok()?;
    let month: u8 = parts.next()?.parse().ok()?;
    let day_text = parts.next()?;
    if day_text.len() != 2 {
        return None;
    }
    let day: u8 = day_text.parse().ok()?;
    let month = ::time::Month::try_from(month).ok()?;
    let date = ::time::Date::from_calendar_date(year, month, day).ok()?;
    Some(date.midnight().assume_utc())
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Timestamp::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_utc_offsets_and_dates() {
        let z = Timestamp::parse("2023-05-08T13:56:00Z").unwrap();
        let offset = Timestamp::parse("2023-05-08T15:56:00+02:00").unwrap();
        assert_eq!(z, offset);
        assert_eq!(z.to_rfc3339(), "2023-05-08T13:56:00Z");
        assert_eq!(Timestamp::parse("2023-05-08").unwrap().to_rfc3339(), "2023-05-08T00:00:00Z");
    }

    #[test]
    fn rejects_garbage_with_the_text_in_the_message() {
        let err = Timestamp::parse("yesterday").unwrap_err();
        assert!(err.contains("yesterday"), "{err}");
        assert!(Timestamp::parse("2023-13-01").is_err());
        assert!(Timestamp::parse("2023-02-30").is_err());
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn rfc3339_round_trips(ms in -62_135_596_800_000i64..253_402_300_799_000i64) {
            let t = Timestamp(ms);
            prop_assert_eq!(Timestamp::parse(&t.to_rfc3339()).unwrap(), t);
        }

        #[test]
        fn parse_never_panics(text in ".{0,64}") {
            let _ = Timestamp::parse(&text);
        }
    }
}
