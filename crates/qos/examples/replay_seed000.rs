//! Prints the seed-000 miniature replay table (NVMe and HDD).
//! Run: `cargo run --release -p cairn-qos --example replay_seed000 [duration_s]`.

use cairn_qos::cost::DeviceCapacity;
use cairn_qos::sim::replay::{replay, table};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let duration_s: f64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(60.0);
    for (name, cap, dur) in [
        (
            "NVMe (21500 IOPS)",
            DeviceCapacity::NVME_SEED000,
            duration_s,
        ),
        (
            "HDD (340 IOPS)",
            DeviceCapacity::HDD_SEED000,
            duration_s * 5.0,
        ),
    ] {
        println!("### {name}, {dur} s virtual\n");
        println!("{}", table(&replay(cap, dur)?));
    }
    Ok(())
}
