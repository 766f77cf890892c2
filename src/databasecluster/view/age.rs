//! How old a figure is, as a reader says it: `12 s ago`, `3 min 20 s ago`, `2 h 5 min ago`,
//! `3 d 4 h ago`. Pure, so that `status` and the live page say it the same way and a test pins
//! it down. A time ahead of the reader's clock (clocks differ between machines) is said as such,
//! never as a negative age.

use jiff::Timestamp;

/// A span of `seconds` (not negative) in at most two units: `45 s`, `3 min 20 s`, `12 min`,
/// `2 h 5 min`, `3 d 4 h`; the smaller unit is left out when it is zero, and seconds once the
/// span reaches ten minutes.
pub fn span(seconds: u64) -> String {
    let (minutes, hours, days) = (seconds / 60, seconds / 3_600, seconds / 86_400);
    let two = |big: u64, big_unit: &str, small: u64, small_unit: &str| {
        if small == 0 {
            format!("{big} {big_unit}")
        } else {
            format!("{big} {big_unit} {small} {small_unit}")
        }
    };
    match seconds {
        0..60 => format!("{seconds} s"),
        60..600 => two(minutes, "min", seconds % 60, "s"),
        600..3_600 => format!("{minutes} min"),
        3_600..86_400 => two(hours, "h", minutes % 60, "min"),
        _ => two(days, "d", hours % 24, "h"),
    }
}

/// How long before `now` the figure observed at `then` was: `12 s ago`; `5 s ahead of this
/// clock` when `then` is later than `now`.
pub fn ago(then: Timestamp, now: Timestamp) -> String {
    let seconds = now.as_second() - then.as_second();
    if seconds < 0 {
        return format!("{} ahead of this clock", span(seconds.unsigned_abs()));
    }
    format!("{} ago", span(seconds.unsigned_abs()))
}

/// [`ago`] for an RFC 3339 time as the API writes it; `None` if it does not parse.
pub fn ago_text(then: &str, now: Timestamp) -> Option<String> {
    then.parse::<Timestamp>().ok().map(|then| ago(then, now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_use_at_most_two_units() {
        let cases = [
            (0, "0 s"),
            (12, "12 s"),
            (59, "59 s"),
            (60, "1 min"),
            (200, "3 min 20 s"),
            (599, "9 min 59 s"),
            (600, "10 min"),
            (3_599, "59 min"),
            (3_600, "1 h"),
            (7_500, "2 h 5 min"),
            (86_399, "23 h 59 min"),
            (86_400, "1 d"),
            (273_600, "3 d 4 h"),
            (400 * 86_400, "400 d"),
        ];
        for (seconds, text) in cases {
            assert_eq!(span(seconds), text, "{seconds} s");
        }
    }

    #[test]
    fn ages_count_back_from_now_and_say_when_a_clock_is_ahead() {
        let now: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        assert_eq!(ago("2026-01-01T00:09:48Z".parse().unwrap(), now), "12 s ago");
        assert_eq!(ago(now, now), "0 s ago");
        assert_eq!(ago("2026-01-01T00:10:05Z".parse().unwrap(), now), "5 s ahead of this clock");
        assert_eq!(ago_text("2025-12-31T22:05:00Z", now).as_deref(), Some("2 h 5 min ago"));
        assert_eq!(ago_text("yesterday", now), None);
    }
}
