//! Kubernetes resource quantities (`1Gi`, `500m`, `1e3`), parsed exactly so that they compare without
//! floating-point error, as `resource.Quantity` does.

use std::cmp::Ordering;
use std::str::FromStr;

/// Nano-units per unit: the finest precision Kubernetes keeps (finer values round away from zero).
const NANOS_PER_UNIT: i128 = 1_000_000_000;

/// Why a string is not a quantity, worded as the apiserver words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text does not follow the quantity grammar.
    #[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
    Format,
    /// The value is outside the range this implementation represents exactly (about ±1.7e29).
    #[error("quantity is too large")]
    TooLarge,
}

/// An exact Kubernetes quantity, held as a count of nano-units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity {
    nanos: i128,
}

impl Quantity {
    /// The quantity `units` (a whole number of units, e.g. `3` for `3`).
    pub fn from_units(units: i64) -> Self {
        Quantity { nanos: i128::from(units) * NANOS_PER_UNIT }
    }

    /// Orders two quantities exactly.
    pub fn compare(&self, other: &Quantity) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }

    /// -1, 0 or 1 as the quantity is negative, zero or positive.
    pub fn sign(&self) -> i64 {
        self.nanos.signum() as i64
    }

    /// The value as an `i64`, if it is a whole number in range.
    pub fn as_integer(&self) -> Option<i64> {
        if self.nanos % NANOS_PER_UNIT != 0 {
            return None;
        }
        i64::try_from(self.nanos / NANOS_PER_UNIT).ok()
    }

    /// The value as the nearest `f64`.
    pub fn as_approximate_float(&self) -> f64 {
        let whole = (self.nanos / NANOS_PER_UNIT) as f64;
        let frac = (self.nanos % NANOS_PER_UNIT) as f64 / NANOS_PER_UNIT as f64;
        whole + frac
    }

    /// Whether the value is a whole multiple of `unit` (a huge page's size, say; zero is one).
    pub fn is_multiple_of(&self, unit: &Quantity) -> bool {
        unit.nanos > 0 && self.nanos % unit.nanos == 0
    }

    /// The sum, unless it overflows the exact range.
    pub fn checked_add(&self, other: &Quantity) -> Option<Quantity> {
        self.nanos.checked_add(other.nanos).map(|nanos| Quantity { nanos })
    }

    /// The difference, unless it overflows the exact range.
    pub fn checked_sub(&self, other: &Quantity) -> Option<Quantity> {
        self.nanos.checked_sub(other.nanos).map(|nanos| Quantity { nanos })
    }
}

/// The multiplier a suffix stands for: `10^decimal * 2^binary`.
struct Multiplier {
    decimal: i32,
    binary: u32,
}

fn suffix_multiplier(suffix: &str) -> Result<Multiplier, QuantityError> {
    let decimal = |decimal| Ok(Multiplier { decimal, binary: 0 });
    let binary = |binary| Ok(Multiplier { decimal: 0, binary });
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E']).ok_or(QuantityError::Format)?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(QuantityError::Format);
            }
            let exponent: i32 = exponent.parse().map_err(|_| QuantityError::TooLarge)?;
            decimal(exponent)
        }
    }
}

fn pow10(exponent: u32) -> Result<i128, QuantityError> {
    10i128.checked_pow(exponent).ok_or(QuantityError::TooLarge)
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (negative, unsigned) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        let number_len = unsigned.bytes().take_while(|b| b.is_ascii_digit() || *b == b'.').count();
        let (number, suffix) = unsigned.split_at(number_len);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return Err(QuantityError::Format);
        }
        let multiplier = suffix_multiplier(suffix)?;
        let mut mantissa: i128 = 0;
        for digit in whole.bytes().chain(fraction.bytes()) {
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(i128::from(digit - b'0')))
                .ok_or(QuantityError::TooLarge)?;
        }
        let fraction_digits = i32::try_from(fraction.len()).map_err(|_| QuantityError::TooLarge)?;
        // value = mantissa * 10^(decimal - fraction_digits) * 2^binary, in nano-units: shift by 9 more.
        let scale = multiplier.decimal - fraction_digits + 9;
        let scaled = mantissa.checked_shl(multiplier.binary).filter(|v| v >> multiplier.binary == mantissa);
        let mut nanos = scaled.ok_or(QuantityError::TooLarge)?;
        if scale >= 0 {
            nanos = nanos.checked_mul(pow10(scale.unsigned_abs())?).ok_or(QuantityError::TooLarge)?;
        } else {
            // Finer than a nano-unit: round away from zero, as Kubernetes does.
            let divisor = pow10(scale.unsigned_abs()).unwrap_or(i128::MAX);
            nanos = nanos / divisor + i128::from(nanos % divisor != 0);
        }
        Ok(Quantity { nanos: if negative { -nanos } else { nanos } })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Quantity {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn binary_and_decimal_suffixes_scale_exactly() {
        assert_eq!(q("1Ki"), Quantity::from_units(1024));
        assert_eq!(q("1Mi"), Quantity::from_units(1 << 20));
        assert_eq!(q("1Gi"), Quantity::from_units(1 << 30));
        assert_eq!(q("1Ti"), Quantity::from_units(1 << 40));
        assert_eq!(q("1Pi"), Quantity::from_units(1 << 50));
        assert_eq!(q("1Ei"), Quantity::from_units(1 << 60));
        assert_eq!(q("1k"), Quantity::from_units(1000));
        assert_eq!(q("1M"), Quantity::from_units(1_000_000));
        assert_eq!(q("1G"), Quantity::from_units(1_000_000_000));
        assert_eq!(q("2T"), Quantity::from_units(2_000_000_000_000));
        assert_eq!(q("1P"), Quantity::from_units(10i64.pow(15)));
        assert_eq!(q("1E"), Quantity::from_units(10i64.pow(18)));
        assert_eq!(q("1500m"), q("1.5"));
        assert_eq!(q("1000000u"), q("1"));
        assert_eq!(q("1000000000n"), q("1"));
        assert_eq!(q("1.5Ki"), Quantity::from_units(1536));
        assert_eq!(q("1024Mi"), q("1Gi"));
    }

    #[test]
    fn exponents_signs_and_bare_fractions_parse() {
        assert_eq!(q("1e3"), Quantity::from_units(1000));
        assert_eq!(q("1E3"), Quantity::from_units(1000));
        assert_eq!(q("1e+3"), Quantity::from_units(1000));
        assert_eq!(q("5e-1"), q("500m"));
        assert_eq!(q("-1"), Quantity::from_units(-1));
        assert_eq!(q("+1"), Quantity::from_units(1));
        assert_eq!(q(".5"), q("500m"));
        assert_eq!(q("1."), Quantity::from_units(1));
        assert_eq!(q("0"), Quantity::from_units(0));
    }

    #[test]
    fn precision_finer_than_nano_rounds_away_from_zero() {
        assert_eq!(q("0.1n"), q("1n"));
        assert_eq!(q("-0.1n"), q("-1n"));
        assert_eq!(q("1.0000000001"), q("1000000001n"));
    }

    #[test]
    fn malformed_quantities_are_rejected() {
        for bad in ["", "Gi", "1.2.3", "1gi", "1Gb", "1e", "1e+", "abc", "1 Gi", "-", ".", "1ki", "1.5x"] {
            assert_eq!(bad.parse::<Quantity>(), Err(QuantityError::Format), "{bad:?}");
        }
        assert_eq!("1e100".parse::<Quantity>(), Err(QuantityError::TooLarge));
    }

    #[test]
    fn comparisons_are_exact() {
        assert_eq!(q("1Gi").compare(&q("1024Mi")), Ordering::Equal);
        assert_eq!(q("1G").compare(&q("1Gi")), Ordering::Less);
        assert_eq!(q("10Gi").compare(&q("5Gi")), Ordering::Greater);
        assert_eq!(q("100m").compare(&q("0.1")), Ordering::Equal);
        assert_eq!(q("999999999n").compare(&q("1")), Ordering::Less);
    }

    #[test]
    fn conversions_and_arithmetic() {
        assert_eq!(q("1Ki").as_integer(), Some(1024));
        assert_eq!(q("1.5").as_integer(), None);
        assert_eq!(q("1E").as_integer(), Some(10i64.pow(18)));
        assert_eq!(q("10E").as_integer(), None, "beyond i64");
        assert_eq!(q("1500m").as_approximate_float(), 1.5);
        assert_eq!(q("-3").sign(), -1);
        assert_eq!(q("0").sign(), 0);
        assert_eq!(q("2m").sign(), 1);
        assert_eq!(q("1Gi").checked_add(&q("1Gi")), Some(q("2Gi")));
        assert_eq!(q("1").checked_sub(&q("1500m")), Some(q("-500m")));
    }
}
