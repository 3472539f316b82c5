use rkube_api::time::{
    format_rfc3339, format_rfc3339_micros, now_rfc3339, now_rfc3339_micros, parse_rfc3339,
};

fn shape(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_digit() { 'D' } else { c })
        .collect()
}

#[test]
fn metav1_time_is_seconds_precision_utc_z() {
    assert_eq!(shape(&now_rfc3339()), "DDDD-DD-DDTDD:DD:DDZ");
    let t = parse_rfc3339("2006-01-02T15:04:05.999+01:00").unwrap();
    assert_eq!(format_rfc3339(t), "2006-01-02T14:04:05Z");
}

#[test]
fn metav1_microtime_has_six_fraction_digits() {
    assert_eq!(shape(&now_rfc3339_micros()), "DDDD-DD-DDTDD:DD:DD.DDDDDDZ");
    let t = parse_rfc3339("2006-01-02T15:04:05Z").unwrap();
    assert_eq!(format_rfc3339_micros(t), "2006-01-02T15:04:05.000000Z");
}

#[test]
fn parse_rejects_non_rfc3339() {
    assert_eq!(parse_rfc3339("yesterday"), None);
}
