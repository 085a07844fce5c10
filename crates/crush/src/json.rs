//! Reader for `crushtool --dump` JSON: exact 16.16 weights, ids and item order.
//!
//! Owns the translation from Ceph's JSON dump into [`CrushMap`]. It is the most exact input a
//! compiled map can be given in (text weights have only three decimals). Never panics on
//! malformed input: every missing or mistyped field is a [`CrushError::Json`].

use serde_json::Value;

use crate::classes::register_shadow;
use crate::error::CrushError;
use crate::model::{Bucket, BucketAlg, CrushMap, Device, Rule, RuleType, Step};

fn err(msg: impl Into<String>) -> CrushError {
    CrushError::Json(msg.into())
}

fn int(v: &Value, key: &str) -> Result<i64, CrushError> {
    v.get(key)
        .and_then(Value::as_i64)
        .ok_or_else(|| err(format!("missing integer field `{key}`")))
}

fn string<'a>(v: &'a Value, key: &str) -> Result<&'a str, CrushError> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| err(format!("missing string field `{key}`")))
}

fn array<'a>(v: &'a Value, key: &str) -> Result<&'a Vec<Value>, CrushError> {
    v.get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| err(format!("missing array field `{key}`")))
}

fn i32_of(v: i64, what: &str) -> Result<i32, CrushError> {
    i32::try_from(v).map_err(|_| err(format!("{what} {v} out of range")))
}

/// Parses a `crushtool --dump` JSON document.
pub fn from_json(text: &str) -> Result<CrushMap, CrushError> {
    let root: Value = serde_json::from_str(text).map_err(|e| err(e.to_string()))?;
    let mut map = CrushMap::default();
    if let Some(t) = root.get("tunables").and_then(Value::as_object) {
        for (name, value) in t {
            if let Some(v) = value.as_u64() {
                // Other keys of the dump (profile flags and the like) are not ours to judge.
                match u32::try_from(v) {
                    Ok(v) => {
                        map.tunables.set(name, v);
                    }
                    Err(_) if map.tunables.fields().iter().any(|(n, _)| n == name) => {
                        return Err(err(format!("tunable {name} {v} out of range")));
                    }
                    Err(_) => {}
                }
            }
        }
    }
    for t in array(&root, "types")? {
        map.types.insert(
            i32_of(int(t, "type_id")?, "type id")?,
            string(t, "name")?.to_string(),
        );
    }
    for d in array(&root, "devices")? {
        let id = i32_of(int(d, "id")?, "device id")?;
        let class = d
            .get("class")
            .and_then(Value::as_str)
            .map(|name| class_id_or_new(&mut map, name));
        map.devices.insert(
            id,
            Device {
                name: string(d, "name")?.to_string(),
                class,
            },
        );
    }
    let straw_calc = map.tunables.straw_calc_version;
    for b in array(&root, "buckets")? {
        let id = i32_of(int(b, "id")?, "bucket id")?;
        let alg_name = string(b, "alg")?;
        let alg = BucketAlg::from_name(alg_name)
            .ok_or_else(|| err(format!("unknown bucket alg `{alg_name}`")))?;
        let mut items = Vec::new();
        let mut weights = Vec::new();
        for it in array(b, "items")? {
            items.push(i32_of(int(it, "id")?, "item id")?);
            let w = int(it, "weight")?;
            weights.push(u32::try_from(w).map_err(|_| err(format!("weight {w} out of range")))?);
        }
        let name = string(b, "name")?.to_string();
        let bucket = Bucket::new(
            id,
            name.clone(),
            i32_of(int(b, "type_id")?, "type id")?,
            alg,
            items,
            weights,
            straw_calc,
        )?;
        map.insert_bucket(bucket)?;
        if let Some((orig, class)) = name.split_once('~') {
            let class_id = class_id_or_new(&mut map, class);
            register_shadow(&mut map, orig, class_id, id);
        }
    }
    for r in array(&root, "rules")? {
        map.rules.insert(
            i32_of(int(r, "rule_id")?, "rule id")?,
            rule_from_json(&map, r)?,
        );
    }
    Ok(map)
}

fn class_id_or_new(map: &mut CrushMap, name: &str) -> i32 {
    if let Some(id) = map.class_id(name) {
        return id;
    }
    let id = map.classes.keys().next_back().map_or(0, |k| k + 1);
    map.classes.insert(id, name.to_string());
    id
}

/// crushtool dumps the steps it has no name for as raw opcodes (vary_r = 12, stable = 13).
fn step_from_opcode(opcode: i64, arg1: i64) -> Result<Step, CrushError> {
    let arg = i32_of(arg1, "step argument")?;
    Ok(match opcode {
        8 => Step::SetChooseTries(arg),
        9 => Step::SetChooseleafTries(arg),
        10 => Step::SetChooseLocalTries(arg),
        11 => Step::SetChooseLocalFallbackTries(arg),
        12 => Step::SetChooseleafVaryR(arg),
        13 => Step::SetChooseleafStable(arg),
        other => return Err(err(format!("unsupported raw rule opcode {other}"))),
    })
}

fn rule_from_json(map: &CrushMap, r: &Value) -> Result<Rule, CrushError> {
    let rule_type = match int(r, "type")? {
        1 => RuleType::Replicated,
        3 => RuleType::Erasure,
        4 => RuleType::MsrFirstn,
        5 => RuleType::MsrIndep,
        t => return Err(err(format!("unknown rule type {t}"))),
    };
    let mut steps = Vec::new();
    for s in array(r, "steps")? {
        if let Some(opcode) = s.get("opcode").and_then(Value::as_i64) {
            steps.push(step_from_opcode(opcode, int(s, "arg1")?)?);
            continue;
        }
        let op = string(s, "op")?;
        let num = || int(s, "num").and_then(|n| i32_of(n, "step num"));
        let type_id = || -> Result<i32, CrushError> {
            let name = string(s, "type")?;
            map.type_id(name)
                .ok_or_else(|| err(format!("unknown type `{name}` in rule step")))
        };
        steps.push(match op {
            "take" => Step::Take(i32_of(int(s, "item")?, "take item")?),
            "emit" => Step::Emit,
            "choose_firstn" => Step::ChooseFirstn {
                n: num()?,
                type_id: type_id()?,
            },
            "choose_indep" => Step::ChooseIndep {
                n: num()?,
                type_id: type_id()?,
            },
            "chooseleaf_firstn" => Step::ChooseleafFirstn {
                n: num()?,
                type_id: type_id()?,
            },
            "chooseleaf_indep" => Step::ChooseleafIndep {
                n: num()?,
                type_id: type_id()?,
            },
            "set_choose_tries" => Step::SetChooseTries(num()?),
            "set_chooseleaf_tries" => Step::SetChooseleafTries(num()?),
            "set_choose_local_tries" => Step::SetChooseLocalTries(num()?),
            "set_choose_local_fallback_tries" => Step::SetChooseLocalFallbackTries(num()?),
            "set_chooseleaf_vary_r" => Step::SetChooseleafVaryR(num()?),
            "set_chooseleaf_stable" => Step::SetChooseleafStable(num()?),
            other => return Err(err(format!("unknown rule step `{other}`"))),
        });
    }
    Ok(Rule {
        id: i32_of(int(r, "rule_id")?, "rule id")?,
        name: r
            .get("rule_name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        rule_type,
        min_size: i32_of(
            r.get("min_size").and_then(Value::as_i64).unwrap_or(1),
            "min_size",
        )?,
        max_size: i32_of(
            r.get("max_size").and_then(Value::as_i64).unwrap_or(10),
            "max_size",
        )?,
        steps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-device map whose replicated rule has the given min_size and tunables.
    fn dump(min_size: &str, tunables: &str) -> String {
        format!(
            r#"{{"tunables": {{{tunables}}},
                "types": [{{"type_id": 0, "name": "osd"}}, {{"type_id": 1, "name": "root"}}],
                "devices": [{{"id": 0, "name": "osd.0"}}],
                "buckets": [{{"id": -1, "name": "default", "type_id": 1, "alg": "straw2",
                              "items": [{{"id": 0, "weight": 65536}}]}}],
                "rules": [{{"rule_id": 0, "rule_name": "r", "type": 1, "min_size": {min_size},
                            "steps": [{{"op": "take", "item": -1}}, {{"op": "emit"}}]}}]}}"#
        )
    }

    #[test]
    fn in_range_integers_read_back() {
        let map = from_json(&dump(
            "2",
            r#""choose_total_tries": 50, "profile": "jewel""#,
        ))
        .unwrap();
        assert_eq!(map.tunables.choose_total_tries, 50);
        assert_eq!(map.rules[&0].min_size, 2);
    }

    #[test]
    fn out_of_range_integers_are_refused_not_wrapped() {
        // Cast to u32, 2^32 + 50 would read back as 50, and 2^32 + 1 as 1.
        let e = from_json(&dump("1", r#""choose_total_tries": 4294967346"#)).unwrap_err();
        assert!(e.to_string().contains("choose_total_tries"), "{e}");
        let e = from_json(&dump("4294967297", "")).unwrap_err();
        assert!(e.to_string().contains("min_size"), "{e}");
    }

    #[test]
    fn large_values_of_keys_that_are_not_tunables_are_ignored() {
        let map = from_json(&dump("1", r#""some_flag": 4294967346"#)).unwrap();
        assert_eq!(map.tunables, CrushMap::default().tunables);
    }
}
