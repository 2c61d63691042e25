//! Merging the linux resources of one plugin reply into the resources being
//! built, claiming each field set. Shared by container creation (the
//! adjustment) and by updates of existing containers.

use protobuf::MessageField;

use super::owners::{Conflict, Owners};
use crate::api::{self, Field};

/// Copies each optional field set in `$src` into every target, claiming it.
macro_rules! merge_opt {
    ($o:expr, $id:expr, $plugin:expr, $src:expr, $targets:expr, $($name:ident => $field:expr),+ $(,)?) => {
        $(
            if let Some(v) = $src.$name.as_ref() {
                $o.claim($id, $field, $plugin)?;
                for t in $targets.iter_mut() {
                    t.$name = MessageField::some(v.clone());
                }
            }
        )+
    };
}

fn merge_memory(
    o: &mut Owners,
    id: &str,
    plugin: &str,
    src: &api::LinuxMemory,
    targets: &mut [&mut api::LinuxMemory],
) -> Result<(), Conflict> {
    merge_opt!(o, id, plugin, src, targets,
        limit => Field::MemLimit,
        reservation => Field::MemReservation,
        swap => Field::MemSwapLimit,
        kernel => Field::MemKernelLimit,
        kernel_tcp => Field::MemTCPLimit,
        swappiness => Field::MemSwappiness,
        disable_oom_killer => Field::MemDisableOomKiller,
        use_hierarchy => Field::MemUseHierarchy,
    );
    Ok(())
}

fn merge_cpu(
    o: &mut Owners,
    id: &str,
    plugin: &str,
    src: &api::LinuxCPU,
    targets: &mut [&mut api::LinuxCPU],
) -> Result<(), Conflict> {
    merge_opt!(o, id, plugin, src, targets,
        shares => Field::CPUShares,
        quota => Field::CPUQuota,
        period => Field::CPUPeriod,
        realtime_runtime => Field::CPURealtimeRuntime,
        realtime_period => Field::CPURealtimePeriod,
    );
    if !src.cpus.is_empty() {
        o.claim(id, Field::CPUSetCPUs, plugin)?;
        for t in targets.iter_mut() {
            t.cpus = src.cpus.clone();
        }
    }
    if !src.mems.is_empty() {
        o.claim(id, Field::CPUSetMems, plugin)?;
        for t in targets.iter_mut() {
            t.mems = src.mems.clone();
        }
    }
    Ok(())
}

/// Merges `src` (one plugin's requested resources for container `id`) into
/// every target.
pub fn merge_resources(
    o: &mut Owners,
    id: &str,
    plugin: &str,
    src: &api::LinuxResources,
    targets: &mut [&mut api::LinuxResources],
) -> Result<(), Conflict> {
    if let Some(mem) = src.memory.as_ref() {
        let mut mems: Vec<&mut api::LinuxMemory> = targets
            .iter_mut()
            .map(|t| t.memory.mut_or_insert_default())
            .collect();
        merge_memory(o, id, plugin, mem, &mut mems)?;
    }
    if let Some(cpu) = src.cpu.as_ref() {
        let mut cpus: Vec<&mut api::LinuxCPU> = targets
            .iter_mut()
            .map(|t| t.cpu.mut_or_insert_default())
            .collect();
        merge_cpu(o, id, plugin, cpu, &mut cpus)?;
    }
    for l in &src.hugepage_limits {
        o.claim_entry(id, Field::HugepageLimits, &l.page_size, plugin)?;
        for t in targets.iter_mut() {
            t.hugepage_limits.retain(|h| h.page_size != l.page_size);
            t.hugepage_limits.push(l.clone());
        }
    }
    let mut unified: Vec<_> = src.unified.iter().collect();
    unified.sort();
    for (k, v) in unified {
        o.claim_entry(id, Field::CgroupsUnified, k, plugin)?;
        for t in targets.iter_mut() {
            t.unified.insert(k.clone(), v.clone());
        }
    }
    for d in &src.devices {
        for t in targets.iter_mut() {
            t.devices.push(d.clone());
        }
    }
    merge_opt!(o, id, plugin, src, targets,
        blockio_class => Field::BlockioClass,
        rdt_class => Field::RdtClass,
        pids => Field::PidsLimit,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem_limit(v: i64) -> api::LinuxResources {
        let mut r = api::LinuxResources::new();
        r.memory.mut_or_insert_default().limit = MessageField::some(api::OptionalInt64 {
            value: v,
            ..Default::default()
        });
        r
    }

    #[test]
    fn resources_claimed_per_field() {
        let mut o = Owners::default();
        let mut a = api::LinuxResources::new();
        let mut b = api::LinuxResources::new();
        merge_resources(&mut o, "c", "10-a", &mem_limit(5), &mut [&mut a, &mut b]).unwrap();
        assert_eq!(a.memory.limit.value, 5);
        assert_eq!(b.memory.limit.value, 5);
        let mut cpu = api::LinuxResources::new();
        cpu.cpu.mut_or_insert_default().cpus = "0-1".into();
        cpu.unified.insert("memory.high".into(), "1M".into());
        merge_resources(&mut o, "c", "20-b", &cpu, &mut [&mut a]).unwrap();
        assert_eq!(a.cpu.cpus, "0-1");
        assert_eq!(a.unified["memory.high"], "1M");
        let e = merge_resources(&mut o, "c", "20-b", &mem_limit(7), &mut [&mut a]).unwrap_err();
        assert_eq!(e.field, "MemLimit");
        assert_eq!((e.plugin.as_str(), e.other.as_str()), ("20-b", "10-a"));
        let e = merge_resources(&mut o, "c", "30-c", &cpu, &mut [&mut a]).unwrap_err();
        assert_eq!(e.field, "CPUSetCPUs");
    }
}
