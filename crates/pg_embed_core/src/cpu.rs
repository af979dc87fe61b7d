//! The CPU features every kernel chooses by, read once per process, in one place.
//!
//! The machines pg_embed runs on differ (AVX2 only; AVX-512 with or without AVX512-BF16;
//! AMX on Sapphire Rapids), and each kind takes its own path: the float32 product
//! (`kernels::float32`'s AVX-512 panels, or torch's layout through the gemm crate), the
//! element-wise `dispatch!` functions (AVX-512, AVX2 + FMA, or plain code) and the bfloat16
//! kernels (`kernels::bf16`). `PG_EMBED_CPU` caps what is used at a lower kind, so that one
//! machine runs, and tests, the paths another kind of machine would select:
//!
//! | `PG_EMBED_CPU` | what is used (at most)                                  |
//! |----------------|---------------------------------------------------------|
//! | `portable`     | plain code (the gemm crate still picks its own)         |
//! | `avx2`         | AVX2 + FMA: an AVX2-only machine                        |
//! | `avx512`       | AVX-512 F/VL/DQ without AVX512-BF16 (Skylake, Ice Lake) |
//! | `avx512-bf16`  | and AVX512-BF16, without AMX (Zen 4, Cooper Lake)       |
//! | `amx`, unset   | everything the CPU has                                  |
//!
//! A cap never enables what the CPU lacks. An unknown value caps nothing and is reported
//! by [`describe`].

use std::sync::OnceLock;

/// The kinds of CPU, slowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Portable,
    Avx2,
    Avx512,
    Avx512Bf16,
    Amx,
}

impl Level {
    pub const ALL: [Level; 5] = [Level::Portable, Level::Avx2, Level::Avx512, Level::Avx512Bf16, Level::Amx];

    pub fn name(self) -> &'static str {
        match self {
            Level::Portable => "portable",
            Level::Avx2 => "avx2",
            Level::Avx512 => "avx512",
            Level::Avx512Bf16 => "avx512-bf16",
            Level::Amx => "amx",
        }
    }

    pub fn from_name(name: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.name() == name)
    }
}

/// What the kernels may use: the CPU's (and the OS's) features, capped by `PG_EMBED_CPU`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cpu {
    /// AVX2 and FMA.
    pub avx2: bool,
    /// AVX-512 F, VL and DQ (with AVX2 and FMA).
    pub avx512: bool,
    /// AVX512-BF16 (with `avx512`).
    pub avx512_bf16: bool,
    /// AMX-BF16 and AMX-TILE, with the tile state enabled by the OS. (Whether Linux grants
    /// this process the tiles is asked only when a product first needs them.)
    pub amx_bf16: bool,
    /// AVX512-VNNI (with `avx512`): `vpdpbusd` on 512-bit vectors, for int8 products.
    pub avx512_vnni: bool,
    /// AVX-VNNI (with `avx2`): `vpdpbusd` on 256-bit vectors (Alder Lake and later cores
    /// without AVX-512), for int8 products.
    pub avx_vnni: bool,
    /// The cap `PG_EMBED_CPU` set, if it names one.
    pub cap: Option<Level>,
    /// `PG_EMBED_CPU` when it names no level.
    pub unknown_cap: Option<String>,
}

impl Cpu {
    /// Why `level`'s features are not used: "the CPU has no AMX-BF16", or
    /// "PG_EMBED_CPU=avx2 turns AVX512-BF16 off".
    pub fn missing(&self, level: Level) -> String {
        let what = match level {
            Level::Portable => "nothing",
            Level::Avx2 => "AVX2 and FMA",
            Level::Avx512 => "AVX-512",
            Level::Avx512Bf16 => "AVX512-BF16",
            Level::Amx => "AMX-BF16",
        };
        match self.cap {
            Some(cap) if cap < level => format!("PG_EMBED_CPU={} turns {what} off", cap.name()),
            _ => format!("the CPU has no {what}"),
        }
    }

    /// The fastest kind whose features are all in use.
    pub fn level(&self) -> Level {
        if self.amx_bf16 {
            Level::Amx
        } else if self.avx512_bf16 {
            Level::Avx512Bf16
        } else if self.avx512 {
            Level::Avx512
        } else if self.avx2 {
            Level::Avx2
        } else {
            Level::Portable
        }
    }
}

/// This process's features, read on first use.
pub fn cpu() -> &'static Cpu {
    static CPU: OnceLock<Cpu> = OnceLock::new();
    CPU.get_or_init(|| capped(detected(), std::env::var("PG_EMBED_CPU").ok().as_deref()))
}

/// `found` with everything above `cap` (a level's name; empty or None: no cap) turned off.
pub fn capped(found: Cpu, cap: Option<&str>) -> Cpu {
    let Some(name) = cap.filter(|c| !c.is_empty()) else {
        return found;
    };
    let Some(level) = Level::from_name(name) else {
        return Cpu { unknown_cap: Some(name.to_string()), ..found };
    };
    Cpu {
        avx2: found.avx2 && level >= Level::Avx2,
        avx512: found.avx512 && level >= Level::Avx512,
        avx512_bf16: found.avx512_bf16 && level >= Level::Avx512Bf16,
        amx_bf16: found.amx_bf16 && level >= Level::Amx,
        avx512_vnni: found.avx512_vnni && level >= Level::Avx512,
        avx_vnni: found.avx_vnni && level >= Level::Avx2,
        cap: Some(level),
        unknown_cap: None,
    }
}

/// The CPU's name and what is used, e.g. "AMD EPYC 9B14: avx512-bf16 (avx2 avx512
/// avx512-bf16; no amx)" or "... : avx2 (PG_EMBED_CPU=avx2; the CPU has avx512-bf16)".
pub fn describe() -> String {
    let c = cpu();
    let found = detected();
    let mut s = format!("{}: {}", brand(), c.level().name());
    let has = |on: bool, name: &str| if on { name.to_string() } else { format!("no {name}") };
    s += &format!(
        " ({}, {}, {}, {}, {}, {})",
        has(found.avx2, "avx2"),
        has(found.avx512, "avx512"),
        has(found.avx512_bf16, "avx512-bf16"),
        has(found.amx_bf16, "amx"),
        has(found.avx512_vnni, "avx512-vnni"),
        has(found.avx_vnni, "avx-vnni")
    );
    if let Some(level) = c.cap {
        s += &format!("; capped by PG_EMBED_CPU={}", level.name());
    }
    if let Some(bad) = &c.unknown_cap {
        let names: Vec<&str> = Level::ALL.iter().map(|l| l.name()).collect();
        s += &format!("; PG_EMBED_CPU={bad:?} ignored: not one of {}", names.join(", "));
    }
    s
}

/// The features of this CPU and OS, uncapped.
fn detected() -> Cpu {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid_count;
        let avx2 = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
        let avx512 = avx2
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512dq");
        let avx512_bf16 = avx512 && is_x86_feature_detected!("avx512bf16");
        // CPUID.(EAX=7,ECX=0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE; the OS must enable the
        // tile state in XCR0 (bits 17 and 18) as well. The tiles' epilogue and the rounding
        // of rows run on AVX512-BF16 (every AMX CPU has it).
        let edx = if __cpuid_count(0, 0).eax >= 7 { __cpuid_count(7, 0).edx } else { 0 };
        let amx_cpu = edx & (1 << 22) != 0 && edx & (1 << 24) != 0;
        let amx_bf16 = avx512_bf16 && amx_cpu && xcr0() & (0b11 << 17) == 0b11 << 17;
        let avx512_vnni = avx512 && is_x86_feature_detected!("avx512vnni");
        let avx_vnni = avx2 && is_x86_feature_detected!("avxvnni");
        Cpu { avx2, avx512, avx512_bf16, amx_bf16, avx512_vnni, avx_vnni, cap: None, unknown_cap: None }
    }
    #[cfg(not(target_arch = "x86_64"))]
    Cpu::default()
}

/// XCR0: the state components the OS saves for us (0 when XSAVE is off).
#[cfg(target_arch = "x86_64")]
fn xcr0() -> u64 {
    #[target_feature(enable = "xsave")]
    unsafe fn read() -> u64 {
        // SAFETY: the caller checked OSXSAVE.
        unsafe { std::arch::x86_64::_xgetbv(0) }
    }
    // CPUID.1:ECX bit 27 is OSXSAVE, which makes XGETBV legal.
    let osxsave = std::arch::x86_64::__cpuid(1).ecx & (1 << 27) != 0;
    // SAFETY: XGETBV is enabled (OSXSAVE).
    if osxsave { unsafe { read() } } else { 0 }
}

/// The CPU's brand string (CPUID leaves 0x80000002-4), or "unknown CPU".
fn brand() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        if __cpuid(0x8000_0000).eax >= 0x8000_0004 {
            let mut bytes = Vec::with_capacity(48);
            for leaf in 0x8000_0002u32..=0x8000_0004 {
                let r = __cpuid(leaf);
                for v in [r.eax, r.ebx, r.ecx, r.edx] {
                    bytes.extend_from_slice(&v.to_le_bytes());
                }
            }
            let s = String::from_utf8_lossy(&bytes).trim_matches(|c: char| c == '\0' || c.is_whitespace()).to_string();
            if !s.is_empty() {
                return s;
            }
        }
    }
    "unknown CPU".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Cpu {
        Cpu {
            avx2: true,
            avx512: true,
            avx512_bf16: true,
            amx_bf16: true,
            avx512_vnni: true,
            avx_vnni: true,
            cap: None,
            unknown_cap: None,
        }
    }

    #[test]
    fn a_cap_turns_off_what_is_above_it_and_never_turns_on() {
        for level in Level::ALL {
            let c = capped(all(), Some(level.name()));
            assert_eq!(c.level(), level, "{c:?}");
            assert_eq!(c.cap, Some(level));
        }
        let avx2_only = Cpu { avx2: true, ..Cpu::default() };
        assert_eq!(capped(avx2_only.clone(), Some("amx")).level(), Level::Avx2);
        assert_eq!(capped(avx2_only.clone(), Some("")), avx2_only);
        assert_eq!(capped(avx2_only.clone(), None), avx2_only);
        let bad = capped(all(), Some("sse9"));
        assert_eq!((bad.level(), bad.unknown_cap.as_deref()), (Level::Amx, Some("sse9")));
    }

    #[test]
    fn describe_names_the_level_in_use() {
        let d = describe();
        assert!(d.contains(&format!(": {} (", cpu().level().name())), "{d}");
        eprintln!("{d}");
    }
}
