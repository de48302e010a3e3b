//! Extra output rules in CEL, evaluated with the same Kubernetes extension library (kube-cel) that
//! CRD validation rules use, so `output.shots.map(s, s.seconds).sum() == 6` works as it would in
//! an `x-kubernetes-validations` rule.
//!
//! CEL defines integer overflow as an error. The core operators check it; `sum()` is replaced
//! here by a checked one (the extension library's adds with `+`, which wraps around in a release
//! build), and the release profile turns on overflow checks for the CEL crates, so any other
//! wrap-around in them panics, which [`CompiledRule::check`] reports as a failed rule.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use kube_cel::cel::extractors::This;
use kube_cel::cel::{self, objects::Key, Context, ExecutionError, Program, ResolveResult, Value};
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
        context.add_function("sum", checked_sum);
        context.add_variable_from_value("output", to_cel(output));
        let result = catch_unwind(AssertUnwindSafe(|| self.program.execute(&context)));
        let name = format!("rule {:?} (`{}`)", self.message, self.expression);
        match result {
            Ok(Ok(Value::Bool(true))) => Ok(()),
            Ok(Ok(Value::Bool(false))) => Err(format!("{name} is false")),
            Ok(Ok(other)) => Err(format!("{name} gave {other:?}, not a bool")),
            Ok(Err(err)) => Err(format!("{name} could not be evaluated: {err}")),
            Err(panic) => {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "an internal error".into());
                Err(format!(
                    "{name} could not be evaluated: the CEL interpreter failed ({why})"
                ))
            }
        }
    }
}

/// `<list>.sum()` as Kubernetes defines it (int, uint, double or duration elements; an empty
/// list sums to `0`), adding with CEL's own checked operators: an overflow is an error.
fn checked_sum(This(list): This<Arc<Vec<Value>>>) -> ResolveResult {
    let mut items = list.iter();
    let Some(first) = items.next() else {
        return Ok(Value::Int(0));
    };
    let summable = |v: &Value| {
        matches!(
            v,
            Value::Int(_) | Value::UInt(_) | Value::Float(_) | Value::Duration(_)
        )
    };
    if !summable(first) {
        return Err(ExecutionError::function_error(
            "sum",
            format!("cannot sum {first:?}: elements must be int, uint, double or duration"),
        ));
    }
    items.try_fold(first.clone(), |total, item| {
        if std::mem::discriminant(&total) != std::mem::discriminant(item) {
            return Err(ExecutionError::function_error(
                "sum",
                format!(
                    "cannot add {item:?} to a sum of {total:?}: every element must have one type"
                ),
            ));
        }
        total + item.clone()
    })
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

    /// Integers at and around the edges of `int` and `uint`, and small ones.
    const INT_EDGES: [i64; 14] = [
        i64::MAX,
        i64::MAX - 1,
        i64::MIN,
        i64::MIN + 1,
        1 << 62,
        -(1 << 62),
        (i64::MAX / 2) + 1,
        -1,
        0,
        1,
        2,
        3,
        6,
        8,
    ];
    /// Above `i64::MAX`, so JSON gives them as `uint`.
    const UINT_EDGES: [u64; 4] = [u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) + 3];

    /// Deterministic pseudo-random indexes (xorshift), so a failure reproduces.
    fn indexes(seed: u64, bound: usize) -> impl Iterator<Item = usize> {
        let mut x = seed;
        std::iter::repeat_with(move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % bound as u64) as usize
        })
    }

    /// Checks `rule` on `output`: passes exactly when `exact` (the true result, if no step
    /// overflowed) is `Some`; otherwise fails naming the overflow.
    fn assert_checked(rule: &CompiledRule, output: &serde_json::Value, overflowed: bool) {
        let got = rule.check(output);
        if overflowed {
            let err = got.expect_err(&format!("{output} overflows: the rule must fail"));
            assert!(err.to_lowercase().contains("overflow"), "{output}: {err}");
        } else {
            assert_eq!(got, Ok(()), "{output}");
        }
    }

    /// Property: a rule comparing an integer computation with its two's-complement wrapped result
    /// passes exactly when no step overflows. A wrapping evaluator would pass every case; CEL
    /// defines overflow as an error, so the output fails. Holds in debug and release builds.
    #[test]
    fn integer_overflow_fails_the_rule_in_every_build() {
        let sum = rule("output.xs.sum() == output.want");
        let picks: Vec<usize> = indexes(0x9e37_79b9_7f4a_7c15, INT_EDGES.len())
            .take(3 * 400)
            .collect();
        let mut lists: Vec<Vec<i64>> = picks
            .chunks(3)
            .map(|c| c.iter().map(|&i| INT_EDGES[i]).collect())
            .collect();
        // The shot planner's total, reached by wrapping: MAX + MAX + 8 and MIN + MIN + 6.
        lists.push(vec![i64::MAX, i64::MAX, 8]);
        lists.push(vec![i64::MIN, i64::MIN, 6]);
        for xs in &lists {
            let mut exact = 0i128;
            let mut overflowed = false;
            let mut wrapped = 0i64;
            for (n, &x) in xs.iter().enumerate() {
                exact += i128::from(x);
                overflowed |= n > 0 && i64::try_from(exact).is_err();
                wrapped = if n == 0 { x } else { wrapped.wrapping_add(x) };
            }
            assert_checked(&sum, &json!({"xs": xs, "want": wrapped}), overflowed);
        }
        let shots = rule("output.shots.map(s, s.seconds).sum() == 6");
        assert!(shots
            .check(
                &json!({"shots": [{"seconds": i64::MAX}, {"seconds": i64::MAX}, {"seconds": 8}]})
            )
            .is_err());

        for (i, &a) in UINT_EDGES.iter().enumerate() {
            for &b in &UINT_EDGES[i..] {
                let overflowed = a.checked_add(b).is_none();
                assert_checked(
                    &sum,
                    &json!({"xs": [a, b], "want": a.wrapping_add(b)}),
                    overflowed,
                );
            }
        }

        type Op = (
            &'static str,
            fn(i64, i64) -> Option<i64>,
            fn(i64, i64) -> i64,
        );
        let ops: [Op; 4] = [
            ("+", i64::checked_add, i64::wrapping_add),
            ("-", i64::checked_sub, i64::wrapping_sub),
            ("*", i64::checked_mul, i64::wrapping_mul),
            ("/", i64::checked_div, i64::wrapping_div),
        ];
        for (symbol, checked, wrapping) in ops {
            let r = rule(&format!("output.a {symbol} output.b == output.want"));
            for &a in &INT_EDGES {
                for &b in INT_EDGES.iter().filter(|&&b| b != 0) {
                    let overflowed = checked(a, b).is_none();
                    assert_checked(
                        &r,
                        &json!({"a": a, "b": b, "want": wrapping(a, b)}),
                        overflowed,
                    );
                }
            }
        }
    }

    /// Quantities beyond the library's 128-bit range fail the rule instead of comparing wrapped
    /// values.
    #[test]
    fn quantity_overflow_fails_the_rule() {
        let r = rule("quantity(output.q).isLessThan(quantity('1'))");
        for q in ["1e40", "1e60", "-1e40"] {
            let got = r.check(&json!({"q": q}));
            assert!(
                got.as_ref()
                    .is_err_and(|e| e.to_lowercase().contains("overflow")),
                "{q}: {got:?}"
            );
        }
        assert_eq!(r.check(&json!({"q": "500m"})), Ok(()));
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
