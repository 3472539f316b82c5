//! Container lifecycle hooks (upstream `pkg/kubelet/lifecycle/handlers.go`):
//! `postStart` runs right after a container starts, `preStop` before it is
//! stopped, each as `exec` (CRI `ExecSync`), `httpGet` or `sleep`.
//!
//! A failed `postStart` hook kills the container (`FailedPostStartHook`);
//! a failed `preStop` hook is reported (`FailedPreStopHook`) and the stop
//! goes on. The preStop hook's time counts against the grace period; the
//! stop then gets what is left, at least 2 s (upstream's minimum).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Probe};

use super::prober::{self, ExecSync};

/// The least grace a container gets after its preStop hook (upstream's `minimumGracePeriodInSeconds`).
pub const MIN_GRACE_AFTER_HOOK: i64 = 2;

/// Runs `hook` for container `c` (id `id`, reached at `pod_ip`) within
/// `limit`. Errors: the handler's failure as kubelet words it.
pub async fn run(hook: &LifecycleHandler, c: &Container, id: &str, exec: &dyn ExecSync, pod_ip: &str, limit: Duration) -> Result<(), String> {
    if let Some(s) = &hook.sleep {
        tokio::time::sleep(Duration::from_secs(u64::try_from(s.seconds.max(0)).unwrap_or(0)).min(limit)).await;
        return Ok(());
    }
    let secs = i32::try_from(limit.as_secs().max(1)).unwrap_or(i32::MAX);
    let probe = Probe { exec: hook.exec.clone(), http_get: hook.http_get.clone(), timeout_seconds: Some(secs), ..Probe::default() };
    if probe.exec.is_none() && probe.http_get.is_none() {
        return Err("a lifecycle hook needs exec, httpGet or sleep".into());
    }
    match tokio::time::timeout(limit, prober::run(&probe, c, id, exec, pod_ip)).await {
        Ok(r) => r,
        Err(_) => Err(format!("hook did not finish within {}s", limit.as_secs())),
    }
}

/// The grace period left for the stop after a preStop hook that began at
/// `began` (`grace` seconds in all).
pub fn grace_after_hook(grace: i64, began: Instant) -> i64 {
    let spent = i64::try_from(began.elapsed().as_secs()).unwrap_or(i64::MAX);
    (grace - spent).max(MIN_GRACE_AFTER_HOOK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Exit(i32);

    #[async_trait::async_trait]
    impl ExecSync for Exit {
        async fn exec_sync(&self, _id: &str, _cmd: Vec<String>, _t: i64) -> Result<(i32, Vec<u8>), String> {
            Ok((self.0, b"boom".to_vec()))
        }
    }

    fn handler(v: serde_json::Value) -> LifecycleHandler {
        serde_json::from_value(v).unwrap()
    }

    #[tokio::test]
    async fn hooks_run_exec_and_sleep_and_report_failures() {
        let c: Container = serde_json::from_value(json!({"name": "c"})).unwrap();
        let exec = handler(json!({"exec": {"command": ["x"]}}));
        assert_eq!(run(&exec, &c, "i", &Exit(0), "127.0.0.1", Duration::from_secs(5)).await, Ok(()));
        assert_eq!(run(&exec, &c, "i", &Exit(1), "127.0.0.1", Duration::from_secs(5)).await, Err("boom".into()));
        let began = Instant::now();
        let sleep = handler(json!({"sleep": {"seconds": 30}}));
        assert_eq!(run(&sleep, &c, "i", &Exit(0), "127.0.0.1", Duration::from_millis(200)).await, Ok(()));
        assert!(began.elapsed() < Duration::from_secs(5), "sleep is bounded by the limit");
        assert!(run(&handler(json!({})), &c, "i", &Exit(0), "127.0.0.1", Duration::from_secs(1)).await.is_err());
    }

    #[test]
    fn the_stop_gets_the_rest_of_the_grace_period_and_at_least_two_seconds() {
        assert_eq!(grace_after_hook(30, Instant::now()), 30);
        assert_eq!(grace_after_hook(1, Instant::now()), MIN_GRACE_AFTER_HOOK);
    }
}
