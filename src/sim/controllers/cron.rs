//! Cron schedules as CronJobs write them and Kubernetes 1.28 reads them (robfig/cron's standard
//! parser): five fields (minute hour day-of-month month day-of-week, the days 0 = Sunday to 6)
//! with `*`, `?`, lists, ranges that run forwards, steps and names, or the `@hourly`-style
//! macros; UTC. The day of the month and of the week must both match when either is `*` or `?`
//! (without a step), and either may match when both are restricted.

use jiff::Timestamp;
use jiff::tz::TimeZone;

/// A parsed schedule: the allowed values of each field.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    minutes: Vec<bool>,
    hours: Vec<bool>,
    days: Vec<bool>,
    months: Vec<bool>,
    weekdays: Vec<bool>,
    /// Day-of-month and day-of-week are OR-ed when neither is a star (robfig/cron's rule).
    days_or_weekdays: bool,
}

const MONTHS: &[&str] = &["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const WEEKDAYS: &[&str] = &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

fn value(s: &str, names: &[&str], first: u32) -> Option<u32> {
    s.parse().ok().or_else(|| names.iter().position(|n| n.eq_ignore_ascii_case(s)).map(|i| i as u32 + first))
}

/// Parses one field into a bitmap of `min..=max`.
fn field(s: &str, min: u32, max: u32, names: &[&str]) -> Option<Vec<bool>> {
    let mut allowed = vec![false; max as usize + 1];
    for item in s.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, st)) => (r, st.parse::<u32>().ok().filter(|s| *s > 0)?),
            None => (item, 1),
        };
        let (lo, hi) = match range {
            "*" | "?" => (min, max),
            r => match r.split_once('-') {
                Some((a, b)) => (value(a, names, min)?, value(b, names, min)?),
                None if item.contains('/') => (value(r, names, min)?, max),
                None => {
                    let v = value(r, names, min)?;
                    (v, v)
                }
            },
        };
        if lo < min || hi > max || lo > hi {
            return None;
        }
        for v in (lo..=hi).step_by(step as usize) {
            allowed[v as usize] = true;
        }
    }
    Some(allowed)
}

/// Whether a field is a star in robfig/cron's sense: an item `*` or `?` without a step above 1.
fn is_star(field: &str) -> bool {
    field.split(',').any(|item| match item.split_once('/') {
        Some((range, step)) => matches!(range, "*" | "?") && step == "1",
        None => matches!(item, "*" | "?"),
    })
}

impl Schedule {
    /// Parses a schedule; `None` if it is malformed.
    pub fn parse(s: &str) -> Option<Self> {
        let expanded = match s.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let parts: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = parts.as_slice() else { return None };
        Some(Self {
            minutes: field(minute, 0, 59, &[])?,
            hours: field(hour, 0, 23, &[])?,
            days: field(day, 1, 31, &[])?,
            months: field(month, 1, 12, MONTHS)?,
            weekdays: field(weekday, 0, 6, WEEKDAYS)?,
            days_or_weekdays: !is_star(day) && !is_star(weekday),
        })
    }

    fn matches(&self, t: Timestamp) -> bool {
        let z = t.to_zoned(TimeZone::UTC);
        let day_ok = self.days[z.day() as usize];
        let weekday_ok = self.weekdays[z.weekday().to_sunday_zero_offset() as usize];
        let date_ok = if self.days_or_weekdays { day_ok || weekday_ok } else { day_ok && weekday_ok };
        self.minutes[z.minute() as usize]
            && self.hours[z.hour() as usize]
            && self.months[z.month() as usize]
            && date_ok
    }

    /// The first scheduled minute strictly after `after`, searched up to five years ahead.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let start = after.as_second().div_euclid(60) * 60 + 60;
        (0..5 * 366 * 24 * 60)
            .map(|i| start + i * 60)
            .filter_map(|s| Timestamp::from_second(s).ok())
            .find(|t| self.matches(*t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn next_runs() {
        let every_5 = Schedule::parse("*/5 * * * *").unwrap();
        assert_eq!(every_5.next_after(ts("2026-01-01T10:03:30Z")), Some(ts("2026-01-01T10:05:00Z")));
        let daily = Schedule::parse("@daily").unwrap();
        assert_eq!(daily.next_after(ts("2026-01-01T00:00:00Z")), Some(ts("2026-01-02T00:00:00Z")));
        let weekdays = Schedule::parse("30 2 * * MON-FRI").unwrap();
        // 2026-01-03 is a Saturday.
        assert_eq!(weekdays.next_after(ts("2026-01-03T00:00:00Z")), Some(ts("2026-01-05T02:30:00Z")));
        let either = Schedule::parse("0 0 13 * 5").unwrap();
        // Friday 2026-01-02 comes before the 13th.
        assert_eq!(either.next_after(ts("2026-01-01T00:00:00Z")), Some(ts("2026-01-02T00:00:00Z")));
        // `?` is a star: only the 1st and 15th; `*/2` is not: odd days or any Sunday.
        let days = Schedule::parse("0 0 1,15 * ?").unwrap();
        assert_eq!(days.next_after(ts("2026-01-02T00:00:00Z")), Some(ts("2026-01-15T00:00:00Z")));
        let stepped = Schedule::parse("0 0 */2 * 0").unwrap();
        // Odd days or Sundays: the 3rd (a Saturday); as a star, `*/2` would wait for an odd Sunday.
        assert_eq!(stepped.next_after(ts("2026-01-01T00:00:00Z")), Some(ts("2026-01-03T00:00:00Z")));
    }

    #[test]
    fn malformed_schedules_are_refused() {
        for bad in [
            "",
            "* * * *",
            "61 * * * *",
            "*/0 * * * *",
            "5-1 * * * *",
            "@reboot",
            "0 0 * * 7",
            "0 0 * * MON-SUN",
        ] {
            assert!(Schedule::parse(bad).is_none(), "{bad}");
        }
    }
}
