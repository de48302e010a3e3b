//! Extra output rules in CEL, evaluated with the same Kubernetes extension library (kube-cel) that
//! CRD validation rules use, so `output.shots.map(s, s.seconds).sum() == 6` works as it would in
//! an `x-kubernetes-validations` rule.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use kube_cel::cel::{self, objects::Key, Context, Program, Value};
use kube_cel::KubeCelExt as _;

use crate::api::OutputRule;

/// A compiled rule.
pub struct CompiledRule {
    expression: String,
    message: String,
    program: Program,
}

impl std::fmt::Debug for CompiledRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledRule")
            .field("expression", &self.expression)
            .finish_non_exhaustive()
    }
}

impl CompiledRule {
    /// Compiles the rule's expression; the error is the CEL parser's message.
    pub fn compile(rule: &OutputRule) -> Result<Self, String> {
        let program = catch_unwind(|| Program::compile(&rule.expression))
            .map_err(|_| "the CEL parser failed on this expression".to_string())?
            .map_err(|e| e.to_string())?;
        Ok(Self {
            expression: rule.expression.clone(),
            message: rule.message.clone(),
            program,
        })
    }

    /// Evaluates the rule with `output` bound; `Err` is the failure reason, naming the rule.
    pub fn check(&self, output: &serde_json::Value) -> Result<(), String> {
        let mut context = Context::default().with_all();
        context.add_variable_from_value("output", to_cel(output));
        let result = catch_unwind(AssertUnwindSafe(|| self.program.execute(&context)));
        let name = format!("rule {:?} (`{}`)", self.message, self.expression);
        match result {
            Ok(Ok(Value::Bool(true))) => Ok(()),
            Ok(Ok(Value::Bool(false))) => Err(format!("{name} is false")),
            Ok(Ok(other)) => Err(format!("{name} gave {other:?}, not a bool")),
            Ok(Err(err)) => Err(format!("{name} could not be evaluated: {err}")),
            Err(_) => Err(format!(
                "{name} could not be evaluated: the CEL interpreter failed"
            )),
        }
    }
}

/// JSON to CEL: integers stay integers (`int`, or `uint` above `i64::MAX`), a Boolean stays a
/// Boolean, other numbers become `double`.
pub fn to_cel(value: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match value {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::String(Arc::new(s.clone())),
        J::Array(items) => Value::List(Arc::new(items.iter().map(to_cel).collect())),
        J::Object(map) => {
            let map: HashMap<Key, Value> = map
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            Value::Map(cel::objects::Map { map: Arc::new(map) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(expression: &str) -> CompiledRule {
        CompiledRule::compile(&OutputRule {
            expression: expression.into(),
            message: "m".into(),
        })
        .unwrap()
    }

    #[test]
    fn kubernetes_list_extensions_are_available() {
        let r = rule("output.shots.map(s, s.seconds).sum() == 6");
        assert_eq!(
            r.check(&json!({"shots": [{"seconds": 2}, {"seconds": 2}, {"seconds": 2}]})),
            Ok(())
        );
        let err = r
            .check(&json!({"shots": [{"seconds": 2}, {"seconds": 2}, {"seconds": 3}]}))
            .unwrap_err();
        assert_eq!(
            err,
            "rule \"m\" (`output.shots.map(s, s.seconds).sum() == 6`) is false"
        );
    }

    #[test]
    fn errors_and_non_bool_results_fail_naming_the_rule() {
        assert!(rule("output.missing == 1")
            .check(&json!({}))
            .unwrap_err()
            .contains("could not be evaluated"));
        assert!(rule("output")
            .check(&json!("text"))
            .unwrap_err()
            .contains("not a bool"));
        assert!(rule("output.matches('^a+$')").check(&json!("aaa")).is_ok());
        let bad = CompiledRule::compile(&OutputRule {
            expression: "output ==".into(),
            message: "m".into(),
        });
        assert!(bad.is_err());
    }
}
