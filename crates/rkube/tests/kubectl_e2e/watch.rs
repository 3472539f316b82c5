//! `kubectl get -w`: list then watch, seeing changes made after it started.

use std::time::Duration;

use crate::common::{Cluster, Kubectl};

/// How long a watching kubectl may take to show a change.
const SEE_LIMIT: Duration = Duration::from_secs(15);

fn tokens(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// True if the whitespace-separated cells of `line` start with `want`.
fn starts(line: &str, want: &[&str]) -> bool {
    let t = tokens(line);
    t.len() >= want.len() && t[..want.len()] == *want
}

/// `get -w` prints the current objects, then a row for each later create and
/// update; `--output-watch-events` names the event types, including DELETED.
pub fn get_watch_sees_later_changes(_c: &mut Cluster, k: &Kubectl) {
    k.ok(&["create", "namespace", "w"]);
    k.ok(&[
        "create",
        "configmap",
        "first",
        "-n",
        "w",
        "--from-literal=a=1",
    ]);

    let mut watch = k.spawn(&["get", "configmaps", "-n", "w", "-w"]);
    let header = watch.expect_line("(header)", SEE_LIMIT, |l| l.starts_with("NAME"));
    assert_eq!(tokens(&header), ["NAME", "DATA", "AGE"]);
    watch.expect_line("for the existing `first`", SEE_LIMIT, |l| {
        starts(l, &["first", "1"])
    });

    let mut events = k.spawn(&[
        "get",
        "configmaps",
        "-n",
        "w",
        "-w",
        "--output-watch-events",
    ]);
    let header = events.expect_line("(header)", SEE_LIMIT, |l| l.starts_with("EVENT"));
    assert_eq!(tokens(&header), ["EVENT", "NAME", "DATA", "AGE"]);
    events.expect_line("ADDED first", SEE_LIMIT, |l| {
        starts(l, &["ADDED", "first", "1"])
    });

    k.ok(&[
        "create",
        "configmap",
        "second",
        "-n",
        "w",
        "--from-literal=a=1",
    ]);
    watch.expect_line("for the created `second`", SEE_LIMIT, |l| {
        starts(l, &["second", "1"])
    });
    events.expect_line("ADDED second", SEE_LIMIT, |l| {
        starts(l, &["ADDED", "second", "1"])
    });

    let out = k.ok(&[
        "patch",
        "configmap",
        "first",
        "-n",
        "w",
        "--type=merge",
        "-p",
        r#"{"data":{"b":"2"}}"#,
    ]);
    assert_eq!(out.stdout.trim_end(), "configmap/first patched");
    watch.expect_line("for the updated `first` (2 keys)", SEE_LIMIT, |l| {
        starts(l, &["first", "2"])
    });
    events.expect_line("MODIFIED first", SEE_LIMIT, |l| {
        starts(l, &["MODIFIED", "first", "2"])
    });

    k.ok(&["delete", "configmap", "second", "-n", "w"]);
    events.expect_line("DELETED second", SEE_LIMIT, |l| {
        starts(l, &["DELETED", "second"])
    });

    // Both watches are still running (a watch does not end by itself).
    assert!(
        watch.guard().try_wait().is_none(),
        "kubectl get -w exited early; lines: {:?}",
        watch.seen()
    );
    watch.stop();
    events.stop();
}

/// `get NAME -w` starts with the object's current state (the server's
/// synthetic ADDED for resourceVersion=0) and then shows its updates.
pub fn get_watch_single_object_starts_with_current_state(_c: &mut Cluster, k: &Kubectl) {
    k.ok(&[
        "create",
        "configmap",
        "solo",
        "-n",
        "default",
        "--from-literal=a=1",
        "--from-literal=b=2",
    ]);
    k.ok(&[
        "create",
        "configmap",
        "other",
        "-n",
        "default",
        "--from-literal=a=1",
    ]);

    let mut watch = k.spawn(&["get", "configmap", "solo", "-n", "default", "-w"]);
    watch.expect_line("for the current `solo`", SEE_LIMIT, |l| {
        starts(l, &["solo", "2"])
    });

    k.ok(&[
        "patch",
        "configmap",
        "solo",
        "-n",
        "default",
        "--type=merge",
        "-p",
        r#"{"data":{"c":"3"}}"#,
    ]);
    k.ok(&[
        "patch",
        "configmap",
        "other",
        "-n",
        "default",
        "--type=merge",
        "-p",
        r#"{"data":{"c":"3"}}"#,
    ]);
    watch.expect_line("for the updated `solo` (3 keys)", SEE_LIMIT, |l| {
        starts(l, &["solo", "3"])
    });
    // Give `other`'s event time to (wrongly) arrive, then check it did not.
    let late = watch.collect_for(Duration::from_millis(500));
    assert!(
        !watch
            .seen()
            .iter()
            .chain(&late)
            .any(|l| starts(l, &["other"])),
        "a watch on `solo` showed `other`: {:?}",
        watch.seen()
    );
    watch.stop();
}
