//! Resource quantities as quota counts them (upstream
//! `k8s.io/apimachinery/pkg/api/resource` `Quantity`): a value in
//! thousandths of its unit plus the notation it prints in.
//!
//! Parsing accepts `<number><suffix>` with the suffixes `n`, `u`, `m`, `k`, `M`,
//! `G`, `T`, `P`, `E` (decimal SI), `Ki` … `Ei` (binary SI) or an
//! exponent (`1e3`, `2E-2`); precision below a thousandth rounds up, as
//! `MilliValue` does. Printing follows upstream's canonical form: the
//! largest suffix that leaves an integer (`1500m`, `2k`, `128Mi`, `1000`).

use std::fmt;

/// How a quantity prints (upstream `resource.Format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `m`, ``, `k`, `M`, … suffixes.
    DecimalSI,
    /// `Ki`, `Mi`, … suffixes (values below 1024 or fractional print as decimal SI).
    BinarySI,
    /// `e<n>` exponents.
    DecimalExponent,
}

/// A quantity: `milli` thousandths of the unit, printed in `format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    /// The value in thousandths (`500m` is 500, `1Ki` is 1 024 000).
    pub milli: i128,
    /// The notation it prints in.
    pub format: Format,
}

impl Quantity {
    /// A whole number printed in decimal SI (object counts: `pods=1`).
    pub fn count(n: i64) -> Quantity {
        Quantity { milli: i128::from(n) * 1000, format: Format::DecimalSI }
    }

    /// Zero, printed `0`.
    pub fn zero() -> Quantity {
        Quantity::count(0)
    }

    /// Parses `s`; `None` when it is not a quantity.
    pub fn parse(s: &str) -> Option<Quantity> {
        let s = s.trim();
        let (negative, body) = match s.as_bytes().first()? {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let end = body.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(body.len());
        let (number, suffix) = body.split_at(end);
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        let mut mantissa: i128 = 0;
        for c in int_part.chars().chain(frac_part.chars()) {
            mantissa = mantissa.checked_mul(10)?.checked_add(i128::from(c.to_digit(10)?))?;
        }
        // value = mantissa * num / den, in thousandths.
        let mut num: i128 = 1000;
        let mut den: i128 = 10i128.checked_pow(u32::try_from(frac_part.len()).ok()?)?;
        let (format, pow10, pow1024): (Format, i32, u32) = match suffix {
            "" => (Format::DecimalSI, 0, 0),
            "n" => (Format::DecimalSI, -9, 0),
            "u" => (Format::DecimalSI, -6, 0),
            "m" => (Format::DecimalSI, -3, 0),
            "k" => (Format::DecimalSI, 3, 0),
            "M" => (Format::DecimalSI, 6, 0),
            "G" => (Format::DecimalSI, 9, 0),
            "T" => (Format::DecimalSI, 12, 0),
            "P" => (Format::DecimalSI, 15, 0),
            "E" => (Format::DecimalSI, 18, 0),
            "Ki" => (Format::BinarySI, 0, 1),
            "Mi" => (Format::BinarySI, 0, 2),
            "Gi" => (Format::BinarySI, 0, 3),
            "Ti" => (Format::BinarySI, 0, 4),
            "Pi" => (Format::BinarySI, 0, 5),
            "Ei" => (Format::BinarySI, 0, 6),
            other => {
                let exp = other.strip_prefix('e').or_else(|| other.strip_prefix('E'))?;
                let e: i32 = exp.parse().ok().filter(|e: &i32| e.abs() <= 30)?;
                (Format::DecimalExponent, e, 0)
            }
        };
        num = num.checked_mul(1024i128.checked_pow(pow1024)?)?;
        if pow10 >= 0 {
            num = num.checked_mul(10i128.checked_pow(pow10.unsigned_abs())?)?;
        } else {
            den = den.checked_mul(10i128.checked_pow(pow10.unsigned_abs())?)?;
        }
        let scaled = mantissa.checked_mul(num)?;
        let mut milli = scaled / den + i128::from(scaled % den != 0);
        if negative {
            milli = -milli;
        }
        Some(Quantity { milli, format })
    }

    /// `self + other`; a zero `self` takes `other`'s notation (as upstream's `Add`).
    pub fn plus(self, other: Quantity) -> Quantity {
        let format = if self.milli == 0 { other.format } else { self.format };
        Quantity { milli: self.milli.saturating_add(other.milli), format }
    }
}

fn decimal(milli: i128, exponent_style: bool) -> String {
    // milli = m * 10^(e) with e a multiple of 3 starting at -3, as large as possible.
    let (mut m, mut e) = (milli, -3i32);
    while m % 1000 == 0 && e < 18 {
        m /= 1000;
        e += 3;
    }
    if exponent_style {
        return if e == 0 { m.to_string() } else { format!("{m}e{e}") };
    }
    let suffix = match e {
        -3 => "m",
        0 => "",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        _ => "E",
    };
    format!("{m}{suffix}")
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.milli == 0 {
            return f.write_str("0");
        }
        match self.format {
            Format::BinarySI if self.milli % 1000 == 0 && self.milli.abs() >= 1_024_000 => {
                let mut v = self.milli / 1000;
                let mut i = 0;
                while v % 1024 == 0 && i < 6 {
                    v /= 1024;
                    i += 1;
                }
                let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][i];
                write!(f, "{v}{suffix}")
            }
            Format::DecimalExponent => f.write_str(&decimal(self.milli, true)),
            _ => f.write_str(&decimal(self.milli, false)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|| panic!("{s} parses"))
    }

    #[test]
    fn quantities_parse_to_thousandths_and_print_canonically() {
        assert_eq!(q("500m").milli, 500);
        assert_eq!(q("1.5").milli, 1500);
        assert_eq!(q("1Ki").milli, 1_024_000);
        assert_eq!(q("1e3").milli, 1_000_000);
        assert_eq!(q("1n").milli, 1);
        for (input, printed) in [
            ("500m", "500m"),
            ("1.5", "1500m"),
            ("1000", "1k"),
            ("2", "2"),
            ("128Mi", "128Mi"),
            ("1536", "1536"),
            ("1G", "1G"),
            ("0.5Gi", "512Mi"),
            ("1000Ki", "1000Ki"),
            ("1e3", "1e3"),
            ("0", "0"),
        ] {
            assert_eq!(q(input).to_string(), printed, "{input}");
        }
        for bad in ["", "abc", "1x", "1.2.3", "--1", "1e99"] {
            assert_eq!(Quantity::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_zero_sum_takes_the_notation_of_what_is_added() {
        assert_eq!(Quantity::zero().plus(q("128Mi")).to_string(), "128Mi");
        assert_eq!(q("128Mi").plus(q("128Mi")).to_string(), "256Mi");
        assert_eq!(q("500m").plus(q("1")).to_string(), "1500m");
        assert_eq!(q("1").plus(q("1")).to_string(), "2");
    }
}
