//! Formatting helpers shared by the printers: ages, label sets, selectors.

use chrono::{DateTime, Utc};
use serde_json::Value;

/// A duration rendered like apimachinery's `duration.HumanDuration`
/// (`util/duration/duration.go`): about two significant units, e.g. `45s`,
/// `3m2s`, `12m`, `5h3m`, `20h`, `2d3h`, `30d`, `2y10d`, `9y`. `seconds` may be
/// slightly negative from clock skew: down to -1 prints `0s`, below is `<invalid>`.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    if seconds < 0 {
        return "0s".to_string();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 { format!("{}y", hours / 24 / 365) } else { format!("{}y{days}d", hours / 24 / 365) };
    }
    format!("{}y", hours / 24 / 365)
}

/// Parses an RFC 3339 timestamp field (`Time`/`MicroTime`); `None` when absent or malformed.
pub fn timestamp(v: Option<&Value>) -> Option<DateTime<Utc>> {
    let s = v?.as_str()?;
    DateTime::parse_from_rfc3339(s).ok().map(|t| t.with_timezone(&Utc))
}

/// Time since `t`, like printers' `translateTimestampSince`: `<unknown>` when unset.
pub fn since(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    match t {
        Some(t) => human_duration((now - t).num_seconds()),
        None => "<unknown>".to_string(),
    }
}

/// Age of an object (`metadata.creationTimestamp`).
pub fn age(obj: &Value, now: DateTime<Utc>) -> String {
    since(timestamp(obj.pointer("/metadata/creationTimestamp")), now)
}

/// A string field, `""` when absent.
pub fn str_at<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// An integer field, 0 when absent.
pub fn int_at(obj: &Value, pointer: &str) -> i64 {
    obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

/// An array field, empty when absent.
pub fn array_at<'a>(obj: &'a Value, pointer: &str) -> &'a [Value] {
    obj.pointer(pointer).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

/// Number of keys of a map field, 0 when absent.
pub fn map_len(obj: &Value, pointer: &str) -> usize {
    obj.pointer(pointer).and_then(Value::as_object).map(|m| m.len()).unwrap_or(0)
}

/// `a=b,c=d` sorted by key, like `labels.FormatLabels`; `<none>` when empty.
pub fn format_labels(map: Option<&Value>) -> String {
    let mut pairs: Vec<(String, String)> = map
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
        .unwrap_or_default();
    if pairs.is_empty() {
        return "<none>".to_string();
    }
    pairs.sort();
    pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// A `LabelSelector` rendered like `metav1.LabelSelectorAsSelector(..).String()`:
/// requirements sorted by key, `k=v`, `k in (a,b)`, `k notin (a)`, `k`, `!k`.
/// An absent or empty selector renders as `""`.
pub fn format_label_selector(selector: Option<&Value>) -> String {
    let Some(sel) = selector else { return String::new() };
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(labels) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in labels {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or_default())));
        }
    }
    for expr in sel.get("matchExpressions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]) {
        let key = str_at(expr, "/key");
        let mut values: Vec<&str> = array_at(expr, "/values").iter().filter_map(Value::as_str).collect();
        values.sort_unstable();
        let text = match str_at(expr, "/operator") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => return "<invalid>".to_string(),
        };
        reqs.push((key.to_string(), text));
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    reqs.into_iter().map(|(_, t)| t).collect::<Vec<_>>().join(",")
}

/// `list` joined with `,`, with ` + N more...` when `count` exceeds what is
/// listed, like printers' `listWithMoreString`; `empty` when nothing is listed.
pub fn list_with_more(list: &[String], count: usize, empty: &str) -> String {
    let joined = list.join(",");
    if count > list.len() {
        return format!("{joined} + {} more...", count - list.len());
    }
    if joined.is_empty() {
        empty.to_string()
    } else {
        joined
    }
}
