//! Loading many objects fast, two ways:
//! - [`load_direct`]: straight into storage through `rkube-storage` (the
//!   `Storage` trait's `create`, 256 in flight: etcd pipelines them, the
//!   embedded store group-commits them) while no API server runs on the
//!   embedded store. Objects are written as the API server stores them (JSON
//!   with uid and creationTimestamp, no resourceVersion).
//! - [`load_http`]: concurrent POSTs to the API server.

use std::ops::Range;
use std::sync::Arc;

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use indicatif::ProgressBar;
use rkube_storage::{Storage, StorageError};

use crate::client::{Api, ClientError};
use crate::objects::{self, Kind};

/// Writes in flight when loading straight into storage.
pub const DIRECT_IN_FLIGHT: usize = 256;

/// The name of object `i` of `kind` (sorted by `i`).
pub fn name(kind: Kind, i: usize) -> String {
    match kind {
        Kind::Configmaps => format!("cm-{i:07}"),
        Kind::Pods => format!("pod-{i:07}"),
    }
}

/// Creates namespace `ns` straight in storage (no error when it exists).
pub async fn namespace_direct(storage: &Arc<dyn Storage>, ns: &str) -> anyhow::Result<()> {
    let key = match rkube_api::registry::lookup("", "v1", "namespaces") {
        Some(info) => info.object_key("/registry", "", ns),
        None => format!("/registry/namespaces/{ns}"),
    };
    let bytes = serde_json::to_vec(&objects::namespace(ns))?;
    match storage.create(&key, bytes.into()).await {
        Ok(_) | Err(StorageError::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating namespace {ns} in storage")),
    }
}

/// Writes objects `range` of `kind` into namespace `ns` straight into storage.
pub async fn load_direct(storage: &Arc<dyn Storage>, kind: Kind, ns: &str, range: Range<usize>, pb: &ProgressBar) -> anyhow::Result<()> {
    namespace_direct(storage, ns).await?;
    futures::stream::iter(range)
        .map(|i| {
            let storage = storage.clone();
            async move {
                let n = name(kind, i);
                let bytes = serde_json::to_vec(&kind.object(ns, &n, i))?;
                match storage.create(&kind.key(ns, &n), bytes.into()).await {
                    Ok(_) | Err(StorageError::AlreadyExists { .. }) => Ok::<(), anyhow::Error>(()),
                    Err(e) => Err(e).with_context(|| format!("writing {n}")),
                }
            }
        })
        .buffer_unordered(DIRECT_IN_FLIGHT)
        .try_for_each(|()| {
            pb.inc(1);
            futures::future::ready(Ok(()))
        })
        .await
}

/// Creates namespace `ns` through the API (409 is fine).
pub async fn namespace_http(api: &Api, ns: &str) -> Result<(), ClientError> {
    let body = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    match api.create("/api/v1/namespaces", &body).await {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some(409) => Ok(()),
        Err(e) => Err(e),
    }
}

/// POSTs objects `range` of `kind` into `ns` with `in_flight` concurrent requests.
pub async fn load_http(api: &Api, kind: Kind, ns: &str, range: Range<usize>, in_flight: usize, pb: &ProgressBar) -> anyhow::Result<()> {
    namespace_http(api, ns).await?;
    let collection = kind.collection(ns);
    futures::stream::iter(range)
        .map(|i| {
            let collection = collection.clone();
            async move {
                let n = name(kind, i);
                let mut obj = kind.object(ns, &n, i);
                if let Some(meta) = obj.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                    meta.remove("uid");
                    meta.remove("creationTimestamp");
                }
                match api.create(&collection, &obj).await {
                    Ok(_) => Ok(()),
                    Err(e) if e.code() == Some(409) => Ok(()),
                    Err(e) => Err(anyhow::Error::from(e)),
                }
            }
        })
        .buffer_unordered(in_flight.max(1))
        .try_for_each(|()| {
            pb.inc(1);
            futures::future::ready(Ok(()))
        })
        .await
}
