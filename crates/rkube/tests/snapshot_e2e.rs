//! `rkube snapshot save | check | restore` against `rkube up` as users run
//! it (issue 13, item 4): kubectl 1.33 keeps creating ConfigMaps while
//! `rkube snapshot save` runs as another process beside the server; the
//! snapshot checks out; a restore refuses the running server's store and an
//! existing store without `--overwrite`; after the restore the restarted
//! server lists every object acknowledged before the save, and the list's
//! resourceVersion has not gone backwards.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::rkube_bin;
use common::process::{self, Finished};
use common::{Backend, Cluster, Stop};

const LIMIT: Duration = Duration::from_secs(60);

fn rkube(args: &[&str]) -> Finished {
    let mut cmd = Command::new(rkube_bin());
    cmd.args(args);
    process::run(cmd, None, LIMIT)
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn snapshot_saved_while_kubectl_writes_restores_every_acknowledged_object() {
    let mut cluster = Cluster::start(Backend::Embedded);
    let kubectl = cluster.kubectl("1.33");
    let data = cluster.data_dir();
    let snap = cluster.dir().join("snap.db");

    let acked = Arc::new(Mutex::new(BTreeMap::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (kubectl, acked, stop) = (kubectl.clone(), acked.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let name = format!("cm-{i:04}");
                let f = kubectl.ok(&[
                    "create",
                    "configmap",
                    &name,
                    "--from-literal=k=v",
                    "-o",
                    "jsonpath={.metadata.resourceVersion}",
                ]);
                let rv: i64 = f.stdout.trim().parse().expect("resourceVersion");
                acked.lock().unwrap().insert(name, rv);
                i += 1;
            }
        })
    };
    let wait_for = |n: usize| {
        let deadline = Instant::now() + LIMIT;
        while acked.lock().unwrap().len() < n {
            assert!(Instant::now() < deadline, "kubectl creates too slow");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for(5);
    let before_save = acked.lock().unwrap().clone();
    let saved = rkube(&["snapshot", "save", path(&snap), "--data-dir", path(&data)]).success();
    assert!(saved.stdout.starts_with(&format!("Snapshot saved at {}: revision ", snap.display())), "{}", saved.stdout);
    wait_for(before_save.len() + 3);
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer thread");
    let acked = acked.lock().unwrap().clone();

    let checked = rkube(&["snapshot", "check", path(&snap)]).success();
    let revision: i64 = checked
        .stdout
        .strip_prefix(&format!("{}: ok: revision ", snap.display()))
        .and_then(|r| r.split(',').next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("unexpected check output: {}", checked.stdout));

    let refused = rkube(&["snapshot", "restore", path(&snap), "--data-dir", path(&data), "--overwrite"]).exit_code(1);
    assert!(refused.stderr.contains("is already open: stop the server before restoring"), "{}", refused.stderr);

    cluster.stop(Stop::Term);
    let refused = rkube(&["snapshot", "restore", path(&snap), "--data-dir", path(&data)]).exit_code(1);
    assert!(
        refused.stderr.contains("already holds a store (revision ")
            && refused.stderr.contains("pass --overwrite to replace it with the snapshot"),
        "{}",
        refused.stderr
    );
    let restored = rkube(&["snapshot", "restore", path(&snap), "--data-dir", path(&data), "--overwrite"]).success();
    assert!(restored.stdout.starts_with(&format!("Restored {} into {}: ", snap.display(), data.display())));

    cluster.restart();
    let (code, body) = cluster.http_get("/api/v1/namespaces/default/configmaps");
    assert_eq!(code, 200, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).expect("list JSON");
    let listed: BTreeMap<String, i64> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|cm| {
            let name = cm.pointer("/metadata/name")?.as_str()?;
            let rv = cm.pointer("/metadata/resourceVersion")?.as_str()?.parse().ok()?;
            name.starts_with("cm-").then(|| (name.to_string(), rv))
        })
        .collect();
    let expected: BTreeMap<String, i64> =
        acked.iter().filter(|(_, rv)| **rv <= revision).map(|(n, rv)| (n.clone(), *rv)).collect();
    assert_eq!(listed, expected, "restored objects differ from those acknowledged at or below revision {revision}");
    for name in before_save.keys() {
        assert!(listed.contains_key(name), "{name} was acknowledged before the save and is missing");
    }
    let list_rv: i64 =
        list.pointer("/metadata/resourceVersion").and_then(|v| v.as_str()?.parse().ok()).expect("list RV");
    let newest_seen = acked.values().copied().max().unwrap_or(0);
    assert!(list_rv >= newest_seen, "resourceVersion went backwards: {list_rv} < {newest_seen}");
}
