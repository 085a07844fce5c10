//! Prints a [`CrushMap`] as crushtool text, in `crushtool -d` layout.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::convert::fixed_u32;
use crate::model::{BucketAlg, CrushMap, Step};

/// Formats a 16.16 weight as crushtool does (three decimals), adding decimals only when three
/// would not read back to the same fixed-point value.
pub fn format_weight(weight: u32) -> String {
    let value = weight as f32 / 65536.0f32;
    for decimals in 3..=9 {
        let text = format!("{value:.decimals$}");
        if let Ok(back) = text.parse::<f32>() {
            if fixed_u32(f64::from(back * 65536.0f32)) == weight {
                return text;
            }
        }
    }
    format!("{value:.9}")
}

/// Writes the whole map.
pub fn write(map: &CrushMap) -> String {
    let mut out = String::new();
    out.push_str("# begin crush map\n");
    for (name, value) in map.tunables.fields() {
        let _ = writeln!(out, "tunable {name} {value}");
    }
    out.push_str("\n# devices\n");
    for (id, dev) in &map.devices {
        let _ = write!(out, "device {id} {}", dev.name);
        if let Some(class) = dev.class.and_then(|c| map.classes.get(&c)) {
            let _ = write!(out, " class {class}");
        }
        out.push('\n');
    }
    out.push_str("\n# types\n");
    for (id, name) in &map.types {
        let _ = writeln!(out, "type {id} {name}");
    }
    out.push_str("\n# buckets\n");
    let mut done = BTreeSet::new();
    for bucket in map.iter_buckets() {
        write_bucket_tree(map, bucket.id, &mut done, &mut out);
    }
    out.push_str("\n# rules\n");
    for rule in map.rules.values() {
        if rule.name.is_empty() {
            out.push_str("rule {\n");
        } else {
            let _ = writeln!(out, "rule {} {{", rule.name);
        }
        let _ = writeln!(out, "\tid {}", rule.id);
        let _ = writeln!(out, "\ttype {}", rule.rule_type.name());
        let _ = writeln!(out, "\tmin_size {}", rule.min_size);
        let _ = writeln!(out, "\tmax_size {}", rule.max_size);
        for step in &rule.steps {
            let _ = writeln!(out, "\tstep {}", step_text(map, step));
        }
        out.push_str("}\n");
    }
    if !map.choose_args.is_empty() {
        out.push_str("\n# choose_args\n");
        for (index, set) in &map.choose_args {
            let _ = writeln!(out, "choose_args {} {{", *index as u64);
            for (bucket_id, arg) in set {
                out.push_str("  {\n");
                let _ = writeln!(out, "    bucket_id {bucket_id}");
                if !arg.weight_set.is_empty() {
                    out.push_str("    weight_set [\n");
                    for ws in &arg.weight_set {
                        let ws: Vec<String> = ws.iter().map(|&w| format_weight(w)).collect();
                        let _ = writeln!(out, "      [ {} ]", ws.join(" "));
                    }
                    out.push_str("    ]\n");
                }
                if let Some(ids) = &arg.ids {
                    let ids: Vec<String> = ids.iter().map(i32::to_string).collect();
                    let _ = writeln!(out, "    ids [ {} ]", ids.join(" "));
                }
                out.push_str("  }\n");
            }
            out.push_str("}\n");
        }
    }
    out.push_str("\n# end crush map\n");
    out
}

fn write_bucket_tree(map: &CrushMap, id: i32, done: &mut BTreeSet<i32>, out: &mut String) {
    let Some(bucket) = map.bucket(id) else {
        return;
    };
    if bucket.is_shadow() || !done.insert(id) {
        return;
    }
    for &child in &bucket.items {
        if child < 0 {
            write_bucket_tree(map, child, done, out);
        }
    }
    let type_name = map.types.get(&bucket.type_id).map_or("?", String::as_str);
    let _ = writeln!(out, "{type_name} {} {{", bucket.name);
    let _ = writeln!(out, "\tid {}\t\t# do not change unnecessarily", bucket.id);
    if let Some(shadows) = map.class_buckets.get(&bucket.id) {
        for (class, shadow) in shadows {
            if let Some(cname) = map.classes.get(class) {
                let _ = writeln!(
                    out,
                    "\tid {shadow} class {cname}\t\t# do not change unnecessarily"
                );
            }
        }
    }
    let _ = writeln!(out, "\t# weight {}", format_weight(bucket.weight));
    let _ = writeln!(out, "\talg {}", bucket.alg.name());
    let _ = writeln!(out, "\thash {}\t# rjenkins1", bucket.hash);
    let positional = matches!(bucket.alg, BucketAlg::Uniform | BucketAlg::Tree);
    for (i, (&item, &w)) in bucket.items.iter().zip(&bucket.weights).enumerate() {
        let name = map.item_name(item).unwrap_or("?");
        let _ = write!(out, "\titem {name} weight {}", format_weight(w));
        if positional {
            let _ = write!(out, " pos {i}");
        }
        out.push('\n');
    }
    out.push_str("}\n");
}

fn step_text(map: &CrushMap, step: &Step) -> String {
    let type_name = |t: i32| map.types.get(&t).cloned().unwrap_or_else(|| t.to_string());
    match *step {
        Step::Take(id) => match map.shadow_origin(id) {
            Some((orig, class)) => format!(
                "take {} class {}",
                map.item_name(orig).unwrap_or("?"),
                map.classes.get(&class).map_or("?", String::as_str)
            ),
            None => format!("take {}", map.item_name(id).unwrap_or("?")),
        },
        Step::ChooseFirstn { n, type_id } => {
            format!("choose firstn {n} type {}", type_name(type_id))
        }
        Step::ChooseIndep { n, type_id } => format!("choose indep {n} type {}", type_name(type_id)),
        Step::ChooseleafFirstn { n, type_id } => {
            format!("chooseleaf firstn {n} type {}", type_name(type_id))
        }
        Step::ChooseleafIndep { n, type_id } => {
            format!("chooseleaf indep {n} type {}", type_name(type_id))
        }
        Step::Emit => "emit".to_string(),
        Step::SetChooseTries(n) => format!("set_choose_tries {n}"),
        Step::SetChooseleafTries(n) => format!("set_chooseleaf_tries {n}"),
        Step::SetChooseLocalTries(n) => format!("set_choose_local_tries {n}"),
        Step::SetChooseLocalFallbackTries(n) => format!("set_choose_local_fallback_tries {n}"),
        Step::SetChooseleafVaryR(n) => format!("set_chooseleaf_vary_r {n}"),
        Step::SetChooseleafStable(n) => format!("set_chooseleaf_stable {n}"),
    }
}
