//! Compiles crushtool text into a [`CrushMap`] with crushtool's semantics.

use std::collections::{BTreeMap, BTreeSet};

use super::lexer::Cursor;
use crate::classes::populate_classes;
use crate::convert::fixed_u32;
use crate::error::CrushError;
use crate::model::{
    Bucket, BucketAlg, ChooseArg, ChooseArgMap, CrushMap, Device, Rule, RuleType, Step,
    MAX_BUCKET_WEIGHT, MAX_DEVICE_WEIGHT, WEIGHT_ONE,
};

/// Where a token was, for errors raised after the token stream has moved on.
#[derive(Clone, Copy)]
struct Pos {
    line: usize,
    column: usize,
}

impl Pos {
    fn error(self, message: impl Into<String>) -> CrushError {
        CrushError::Parse {
            line: self.line,
            column: self.column,
            message: message.into(),
        }
    }
}

struct RawItem {
    name: String,
    weight: Option<u32>,
    pos: Option<usize>,
    at: Pos,
}

struct RawBucket {
    type_id: i32,
    name: String,
    id: Option<i32>,
    class_ids: Vec<(String, i32, Pos)>,
    alg: BucketAlg,
    hash: u8,
    items: Vec<RawItem>,
    at: Pos,
}

enum RawStep {
    Resolved(Step),
    Take {
        item: String,
        class: Option<String>,
        at: Pos,
    },
    Choose {
        leaf: bool,
        indep: bool,
        n: i32,
        type_name: String,
        at: Pos,
    },
}

struct RawRule {
    rule: Rule,
    steps: Vec<RawStep>,
}

struct RawChooseArg {
    bucket_id: i32,
    weight_set: Vec<Vec<u32>>,
    ids: Option<Vec<i32>>,
    at: Pos,
}

fn here(c: &Cursor) -> Pos {
    match c.error("") {
        CrushError::Parse { line, column, .. } => Pos { line, column },
        _ => Pos { line: 0, column: 0 },
    }
}

/// Parses (compiles) crushtool text.
pub fn parse(text: &str) -> Result<CrushMap, CrushError> {
    let mut c = Cursor::new(text);
    let mut map = CrushMap::default();
    let mut raw_buckets = Vec::new();
    let mut raw_rules = Vec::new();
    let mut raw_args: Vec<(i64, Vec<RawChooseArg>, Pos)> = Vec::new();
    while !c.at_end() {
        let at = here(&c);
        let word = c.next("a section")?;
        match word.as_str() {
            "tunable" => {
                let name = c.next("a tunable name")?;
                let value = c.int("tunable value")?;
                let value = u32::try_from(value)
                    .map_err(|_| c.error_prev(format!("tunable value {value} out of range")))?;
                if !map.tunables.set(&name, value) {
                    return Err(at.error(format!("unknown tunable `{name}`")));
                }
            }
            "device" => parse_device(&mut c, &mut map)?,
            "type" => {
                let id = c.i32("type id")?;
                let name = c.next("a type name")?;
                if map.types.contains_key(&id) || map.type_id(&name).is_some() {
                    return Err(c.error_prev(format!("type `{name}` ({id}) defined twice")));
                }
                map.types.insert(id, name);
            }
            "rule" => raw_rules.push(parse_rule(&mut c)?),
            "choose_args" => {
                // crushtool prints the default set (-1) as its u64 bit pattern.
                let tok = c.next("a choose_args index")?;
                let index = tok
                    .parse::<i64>()
                    .or_else(|_| tok.parse::<u64>().map(|u| u as i64))
                    .map_err(|_| c.error_prev(format!("bad choose_args index `{tok}`")))?;
                raw_args.push((index, parse_choose_args(&mut c)?, at));
            }
            other => match map.type_id(other) {
                Some(type_id) => raw_buckets.push(parse_bucket(&mut c, type_id, at)?),
                None => {
                    return Err(at.error(format!(
                        "unknown section `{other}` (not a keyword or a defined type)"
                    )))
                }
            },
        }
    }
    build_buckets(&mut map, raw_buckets)?;
    populate_classes(&mut map)?;
    for raw in raw_rules {
        let rule = resolve_rule(&map, raw)?;
        if map.rules.contains_key(&rule.id) {
            return Err(CrushError::Invalid(format!(
                "rule id {} defined twice",
                rule.id
            )));
        }
        map.rules.insert(rule.id, rule);
    }
    for (index, args, at) in raw_args {
        let mut set = ChooseArgMap::new();
        for a in args {
            let Some(bucket) = map.bucket(a.bucket_id) else {
                return Err(a
                    .at
                    .error(format!("choose_args: no bucket {}", a.bucket_id)));
            };
            for ws in &a.weight_set {
                if ws.len() != bucket.size() {
                    return Err(a.at.error(format!(
                        "choose_args: bucket {} needs {} weights, got {}",
                        a.bucket_id,
                        bucket.size(),
                        ws.len()
                    )));
                }
            }
            if let Some(ids) = &a.ids {
                if ids.len() != bucket.size() {
                    return Err(a.at.error(format!(
                        "choose_args: bucket {} needs {} ids, got {}",
                        a.bucket_id,
                        bucket.size(),
                        ids.len()
                    )));
                }
            }
            set.insert(
                a.bucket_id,
                ChooseArg {
                    weight_set: a.weight_set,
                    ids: a.ids,
                },
            );
        }
        if map.choose_args.insert(index, set).is_some() {
            return Err(at.error(format!("choose_args {index} defined twice")));
        }
    }
    Ok(map)
}

fn parse_device(c: &mut Cursor, map: &mut CrushMap) -> Result<(), CrushError> {
    let id = c.i32("device id")?;
    if id < 0 {
        return Err(c.error_prev(format!("device id {id} must be >= 0")));
    }
    let name = c.next("a device name")?;
    let class = if c.eat("class") {
        let cname = c.next("a class name")?;
        Some(match map.class_id(&cname) {
            Some(cid) => cid,
            None => {
                let cid = map.classes.keys().next_back().map_or(0, |k| k + 1);
                map.classes.insert(cid, cname);
                cid
            }
        })
    } else {
        None
    };
    if map.devices.contains_key(&id) || map.item_id(&name).is_some() {
        return Err(c.error_prev(format!("device `{name}` ({id}) defined twice")));
    }
    map.devices.insert(id, Device { name, class });
    Ok(())
}

fn weight_16_16(c: &Cursor, value: f32) -> Result<u32, CrushError> {
    let scaled = value * 65536.0f32;
    if scaled >= u32::MAX as f32 {
        return Err(c.error_prev(format!("weight {value} is too large")));
    }
    Ok(fixed_u32(f64::from(scaled)))
}

fn parse_bucket(c: &mut Cursor, type_id: i32, at: Pos) -> Result<RawBucket, CrushError> {
    let name = c.next("a bucket name")?;
    if matches!(name.as_str(), "{" | "}") {
        return Err(c.error_prev("expected a bucket name"));
    }
    c.expect("{")?;
    let mut b = RawBucket {
        type_id,
        name,
        id: None,
        class_ids: Vec::new(),
        alg: BucketAlg::Straw2,
        hash: 0,
        items: Vec::new(),
        at,
    };
    loop {
        let kat = here(c);
        let key = c.next("a bucket field or `}`")?;
        match key.as_str() {
            "}" => break,
            "id" => {
                let id = c.i32("bucket id")?;
                if id >= 0 {
                    return Err(c.error_prev(format!("bucket id {id} must be negative")));
                }
                if c.eat("class") {
                    let class = c.next("a class name")?;
                    b.class_ids.push((class, id, kat));
                } else if b.id.replace(id).is_some() {
                    return Err(kat.error("bucket id given twice"));
                }
            }
            "alg" => {
                let name = c.next("an algorithm")?;
                b.alg = BucketAlg::from_name(&name)
                    .ok_or_else(|| c.error_prev(format!("unknown bucket algorithm `{name}`")))?;
            }
            "hash" => {
                let h = c.next("a hash id")?;
                b.hash = match h.as_str() {
                    "0" | "rjenkins1" => 0,
                    _ => return Err(c.error_prev(format!("unknown hash `{h}`"))),
                };
            }
            "item" => {
                let name = c.next("an item name")?;
                let mut item = RawItem {
                    name,
                    weight: None,
                    pos: None,
                    at: kat,
                };
                loop {
                    if c.eat("weight") {
                        let w = c.float("item weight")?;
                        item.weight = Some(weight_16_16(c, w)?);
                    } else if c.eat("pos") {
                        let p = c.int("item position")?;
                        item.pos = Some(
                            usize::try_from(p)
                                .map_err(|_| c.error_prev(format!("bad position {p}")))?,
                        );
                    } else {
                        break;
                    }
                }
                b.items.push(item);
            }
            other => return Err(kat.error(format!("unknown bucket field `{other}`"))),
        }
    }
    Ok(b)
}

fn build_buckets(map: &mut CrushMap, raw: Vec<RawBucket>) -> Result<(), CrushError> {
    let mut used_ids: BTreeSet<i32> = raw.iter().filter_map(|b| b.id).collect();
    used_ids.extend(raw.iter().flat_map(|b| b.class_ids.iter().map(|c| c.1)));
    let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
    for (i, b) in raw.iter().enumerate() {
        if by_name.insert(b.name.clone(), i).is_some() || map.item_id(&b.name).is_some() {
            return Err(b.at.error(format!("bucket `{}` defined twice", b.name)));
        }
    }
    let mut ids: Vec<Option<i32>> = raw.iter().map(|b| b.id).collect();
    let mut built = vec![false; raw.len()];
    let mut visiting = vec![false; raw.len()];
    let mut order = Vec::new();
    fn visit(
        i: usize,
        raw: &[RawBucket],
        by_name: &BTreeMap<String, usize>,
        built: &mut [bool],
        visiting: &mut [bool],
        order: &mut Vec<usize>,
    ) -> Result<(), CrushError> {
        if built[i] {
            return Ok(());
        }
        if visiting[i] {
            return Err(raw[i]
                .at
                .error(format!("bucket `{}` contains itself", raw[i].name)));
        }
        visiting[i] = true;
        for item in &raw[i].items {
            if let Some(&j) = by_name.get(&item.name) {
                visit(j, raw, by_name, built, visiting, order)?;
            }
        }
        visiting[i] = false;
        built[i] = true;
        order.push(i);
        Ok(())
    }
    for i in 0..raw.len() {
        visit(i, &raw, &by_name, &mut built, &mut visiting, &mut order)?;
    }
    // Ids are allocated in text order, as crushtool does.
    for slot in ids.iter_mut() {
        if slot.is_none() {
            let mut id = -1;
            while used_ids.contains(&id) {
                id -= 1;
            }
            used_ids.insert(id);
            *slot = Some(id);
        }
    }
    for i in order {
        let b = &raw[i];
        let id = ids[i].unwrap_or(-1);
        if map.bucket(id).is_some() {
            return Err(b.at.error(format!("bucket id {id} used twice")));
        }
        let size = b.items.len();
        let explicit: Vec<usize> = b.items.iter().filter_map(|it| it.pos).collect();
        let explicit_set: BTreeSet<usize> = explicit.iter().copied().collect();
        if explicit_set.len() != explicit.len() {
            return Err(b
                .at
                .error(format!("bucket `{}` repeats an item position", b.name)));
        }
        let mut slots: Vec<Option<(i32, u32)>> = vec![None; size];
        let mut cursor = 0usize;
        for it in &b.items {
            let item_id = map
                .item_id(&it.name)
                .ok_or_else(|| it.at.error(format!("item `{}` is not defined", it.name)))?;
            let default_weight = if item_id >= 0 {
                WEIGHT_ONE
            } else {
                map.bucket(item_id).map_or(0, |c| c.weight)
            };
            let weight = it.weight.unwrap_or(default_weight);
            if item_id >= 0 && weight > MAX_DEVICE_WEIGHT {
                return Err(it.at.error("device weight limited to 100"));
            }
            if item_id < 0 && weight > MAX_BUCKET_WEIGHT {
                return Err(it.at.error("bucket weight limited to 65535"));
            }
            let pos = match it.pos {
                Some(p) if p >= size => {
                    return Err(it
                        .at
                        .error(format!("item position {p} >= bucket size {size}")))
                }
                Some(p) => p,
                None => {
                    while explicit_set.contains(&cursor) {
                        cursor += 1;
                    }
                    cursor += 1;
                    cursor - 1
                }
            };
            slots[pos] = Some((item_id, weight));
        }
        let (items, weights): (Vec<i32>, Vec<u32>) = slots.into_iter().flatten().unzip();
        let mut bucket = Bucket::new(
            id,
            b.name.clone(),
            b.type_id,
            b.alg,
            items,
            weights,
            map.tunables.straw_calc_version,
        )
        .map_err(|e| b.at.error(e.to_string()))?;
        bucket.hash = b.hash;
        map.insert_bucket(bucket)?;
        for (class, shadow_id, _) in &b.class_ids {
            let class_id = match map.class_id(class) {
                Some(cid) => cid,
                None => {
                    let cid = map.classes.keys().next_back().map_or(0, |k| k + 1);
                    map.classes.insert(cid, class.clone());
                    cid
                }
            };
            map.class_buckets
                .entry(id)
                .or_default()
                .insert(class_id, *shadow_id);
        }
    }
    Ok(())
}

fn parse_rule(c: &mut Cursor) -> Result<RawRule, CrushError> {
    let mut name = String::new();
    if c.peek() != Some("{") {
        name = c.next("a rule name")?;
    }
    c.expect("{")?;
    let mut rule = Rule {
        id: -1,
        name,
        rule_type: RuleType::Replicated,
        min_size: 1,
        max_size: 10,
        steps: Vec::new(),
    };
    let mut steps = Vec::new();
    let mut have_id = false;
    loop {
        let at = here(c);
        let key = c.next("a rule field or `}`")?;
        match key.as_str() {
            "}" => break,
            "id" | "ruleset" => {
                rule.id = c.i32("rule id")?;
                if rule.id < 0 {
                    return Err(c.error_prev("rule id must be >= 0"));
                }
                have_id = true;
            }
            "type" => {
                let t = c.next("a rule type")?;
                rule.rule_type = match t.as_str() {
                    "replicated" => RuleType::Replicated,
                    "erasure" => RuleType::Erasure,
                    "msr_firstn" => RuleType::MsrFirstn,
                    "msr_indep" => RuleType::MsrIndep,
                    _ => return Err(c.error_prev(format!("unknown rule type `{t}`"))),
                };
            }
            "min_size" => rule.min_size = c.i32("min_size")?,
            "max_size" => rule.max_size = c.i32("max_size")?,
            "step" => steps.push(parse_step(c)?),
            other => return Err(at.error(format!("unknown rule field `{other}`"))),
        }
    }
    if !have_id {
        return Err(c.error_prev(format!("rule `{}` has no id", rule.name)));
    }
    Ok(RawRule { rule, steps })
}

fn parse_step(c: &mut Cursor) -> Result<RawStep, CrushError> {
    let at = here(c);
    let op = c.next("a step")?;
    let set = |c: &mut Cursor, f: fn(i32) -> Step| -> Result<RawStep, CrushError> {
        Ok(RawStep::Resolved(f(c.i32("step value")?)))
    };
    match op.as_str() {
        "take" => {
            let at = here(c);
            let item = c.next("an item to take")?;
            let class = if c.eat("class") {
                Some(c.next("a class name")?)
            } else {
                None
            };
            Ok(RawStep::Take { item, class, at })
        }
        "emit" => Ok(RawStep::Resolved(Step::Emit)),
        "choose" | "chooseleaf" => {
            let mode = c.next("firstn or indep")?;
            let indep = match mode.as_str() {
                "firstn" => false,
                "indep" => true,
                _ => return Err(c.error_prev(format!("expected firstn or indep, found `{mode}`"))),
            };
            let n = c.i32("replica count")?;
            c.expect("type")?;
            let at = here(c);
            let type_name = c.next("a type name")?;
            Ok(RawStep::Choose {
                leaf: op == "chooseleaf",
                indep,
                n,
                type_name,
                at,
            })
        }
        "set_choose_tries" => set(c, Step::SetChooseTries),
        "set_chooseleaf_tries" => set(c, Step::SetChooseleafTries),
        "set_choose_local_tries" => set(c, Step::SetChooseLocalTries),
        "set_choose_local_fallback_tries" => set(c, Step::SetChooseLocalFallbackTries),
        "set_chooseleaf_vary_r" => set(c, Step::SetChooseleafVaryR),
        "set_chooseleaf_stable" => set(c, Step::SetChooseleafStable),
        other => Err(at.error(format!("unknown step `{other}`"))),
    }
}

fn resolve_rule(map: &CrushMap, raw: RawRule) -> Result<Rule, CrushError> {
    let mut rule = raw.rule;
    for step in raw.steps {
        rule.steps.push(match step {
            RawStep::Resolved(s) => s,
            RawStep::Take { item, class, at } => {
                let id = map
                    .item_id(&item)
                    .ok_or_else(|| at.error(format!("item `{item}` is not defined")))?;
                match class {
                    None => Step::Take(id),
                    Some(class) => {
                        let cid = map
                            .class_id(&class)
                            .ok_or_else(|| at.error(format!("unknown class `{class}`")))?;
                        let shadow = map
                            .class_buckets
                            .get(&id)
                            .and_then(|m| m.get(&cid))
                            .ok_or_else(|| {
                                at.error(format!("no `{class}` devices under `{item}`"))
                            })?;
                        Step::Take(*shadow)
                    }
                }
            }
            RawStep::Choose {
                leaf,
                indep,
                n,
                type_name,
                at,
            } => {
                let type_id = map
                    .type_id(&type_name)
                    .ok_or_else(|| at.error(format!("type `{type_name}` is not defined")))?;
                match (leaf, indep) {
                    (false, false) => Step::ChooseFirstn { n, type_id },
                    (false, true) => Step::ChooseIndep { n, type_id },
                    (true, false) => Step::ChooseleafFirstn { n, type_id },
                    (true, true) => Step::ChooseleafIndep { n, type_id },
                }
            }
        });
    }
    Ok(rule)
}

fn parse_choose_args(c: &mut Cursor) -> Result<Vec<RawChooseArg>, CrushError> {
    c.expect("{")?;
    let mut out = Vec::new();
    loop {
        if c.eat("}") {
            break;
        }
        let at = here(c);
        c.expect("{")?;
        let mut arg = RawChooseArg {
            bucket_id: 0,
            weight_set: Vec::new(),
            ids: None,
            at,
        };
        let mut have_bucket = false;
        loop {
            let key = c.next("bucket_id, weight_set, ids or `}`")?;
            match key.as_str() {
                "}" => break,
                "bucket_id" => {
                    arg.bucket_id = c.i32("bucket id")?;
                    have_bucket = true;
                }
                "weight_set" => {
                    c.expect("[")?;
                    while !c.eat("]") {
                        c.expect("[")?;
                        let mut ws = Vec::new();
                        while !c.eat("]") {
                            let w = c.float("weight")?;
                            ws.push(weight_16_16(c, w)?);
                        }
                        arg.weight_set.push(ws);
                    }
                }
                "ids" => {
                    c.expect("[")?;
                    let mut ids = Vec::new();
                    while !c.eat("]") {
                        ids.push(c.i32("id")?);
                    }
                    arg.ids = Some(ids);
                }
                other => return Err(c.error_prev(format!("unknown choose_args field `{other}`"))),
            }
        }
        if !have_bucket {
            return Err(at.error("choose_args entry without bucket_id"));
        }
        out.push(arg);
    }
    Ok(out)
}
