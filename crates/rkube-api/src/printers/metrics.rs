//! Tables of the resource metrics API (`metrics.k8s.io/v1beta1`), with the columns
//! metrics-server's table convertor gives them (`pkg/api/node.go`, `pkg/api/pod.go`): the name,
//! one quantity column per resource (`cpu`, `memory`) and the `Window` of the CPU rate. A pod's
//! row sums its containers' usage.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::{name, printer, Column, Desc, Printer, NAME};
use crate::quota::quantity::Quantity;

const fn quantity_column(name: &'static str) -> Column {
    Column { name, ty: "string", format: "quantity", priority: 0, description: Desc::Text("") }
}

const WINDOW: Column = Column { name: "Window", ty: "string", format: "duration", priority: 0, description: Desc::Text("") };

const COLUMNS: &[Column] = &[NAME, quantity_column("cpu"), quantity_column("memory"), WINDOW];

/// `metrics.k8s.io` `nodes` (NodeMetrics).
pub const NODE_METRICS: Printer = printer(COLUMNS, node_cells);

/// `metrics.k8s.io` `pods` (PodMetrics).
pub const POD_METRICS: Printer = printer(COLUMNS, pod_cells);

fn node_cells(obj: &Value, _now: DateTime<Utc>) -> Vec<Value> {
    let usage = |r: &str| obj["usage"][r].as_str().unwrap_or("").to_string();
    vec![name(obj), json!(usage("cpu")), json!(usage("memory")), obj["window"].clone()]
}

fn pod_cells(obj: &Value, _now: DateTime<Utc>) -> Vec<Value> {
    let sum = |r: &str| {
        obj["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| Quantity::parse(c["usage"][r].as_str()?))
            .fold(Quantity::zero(), Quantity::plus)
            .to_string()
    };
    vec![name(obj), json!(sum("cpu")), json!(sum("memory")), obj["window"].clone()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_row_sums_its_containers() {
        let pod = json!({"metadata": {"name": "web"}, "window": "15s", "containers": [
            {"name": "a", "usage": {"cpu": "250m", "memory": "4Ki"}},
            {"name": "b", "usage": {"cpu": "500m", "memory": "1Mi"}},
        ]});
        assert_eq!(pod_cells(&pod, Utc::now()), vec![json!("web"), json!("750m"), json!("1028Ki"), json!("15s")]);
        let node = json!({"metadata": {"name": "n1"}, "window": "2s", "usage": {"cpu": "123456n", "memory": "3Mi"}});
        assert_eq!(node_cells(&node, Utc::now()), vec![json!("n1"), json!("123456n"), json!("3Mi"), json!("2s")]);
    }
}
