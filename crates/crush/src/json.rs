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
                map.tunables.set(name, v as u32);
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
        min_size: r.get("min_size").and_then(Value::as_i64).unwrap_or(1) as i32,
        max_size: r.get("max_size").and_then(Value::as_i64).unwrap_or(10) as i32,
        steps,
    })
}
