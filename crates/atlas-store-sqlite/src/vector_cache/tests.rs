//! The vector cache's tests: the scan keeps the nearest, files read back as written, int8
//! scores, positions, the kept mean.

use super::kernels::Nearest;
use super::*;
use proptest::prelude::*;

proptest! {
    #![proptest_config(atlas_testing::proptest_config(256))]
    /// Whatever order distances come in (ties included), the pairs a scan keeps hold the
    /// `keep` smallest of all it was offered.
    #[test]
    fn a_scan_keeps_every_pair_of_the_nearest(
        distances in proptest::collection::vec(0u32..=128, 0..3_000),
        keep in 1usize..300,
        offset in 0usize..3,
    ) {
        let mut out = vec![(7, 7); offset];
        let mut near = Nearest::new(2, keep, &mut out);
        for (i, d) in distances.iter().enumerate() {
            near.offer(*d, i as u32);
        }
        let mut kept = out[offset..].to_vec();
        kept.sort_unstable();
        let mut all: Vec<(u32, u32)> = distances.iter().enumerate().map(|(i, d)| (*d, i as u32)).collect();
        all.sort_unstable();
        let wanted = keep.min(all.len());
        prop_assert_eq!(&kept[..wanted], &all[..wanted]);
        prop_assert!(out[..offset].iter().all(|p| *p == (7, 7)), "pairs before the scan's own are left alone");
    }
}

fn unit(seed: u64, dim: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v: Vec<f32> = (0..dim)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 2001) as f32 / 1000.0 - 1.0
        })
        .collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
    v
}

#[test]
fn an_index_read_back_from_its_file_answers_as_the_original() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.cache");
    let stamp = crate::cache_file::Stamp { schema: 7, epoch: 1, nonce: 3 };
    for precision in [Precision::F32, Precision::Int8] {
        let mut index = Index::with_capacity(48, precision, 0);
        for id in (1..=300).chain([1 << 40]) {
            index.upsert(id, &unit(id as u64, 48));
        }
        index.remove(7);
        crate::cache_file::write(&path, stamp, "k", |e| index.encode(e)).unwrap().commit().unwrap();
        let read =
            |dim, wanted| crate::cache_file::read(&path, stamp, "k", |d| Index::decode(d, dim, wanted, usize::MAX));
        let back = read(48, None).unwrap();
        assert_eq!(back.precision(), precision);
        assert_eq!(back.len(), index.len());
        for q in [3u64, 70, 1 << 40] {
            assert_eq!(back.candidates(&unit(q, 48), 10, 16).unwrap(), index.candidates(&unit(q, 48), 10, 16).unwrap());
        }
        let other = if precision == Precision::F32 { Precision::Int8 } else { Precision::F32 };
        assert!(read(48, Some(precision)).is_ok());
        assert!(read(48, Some(other)).is_err());
        assert!(read(32, None).err().unwrap().contains("48 dimensions"));
    }
}

/// An int8 index read from its file leaves the codes there and keeps answering as one that
/// holds them, through upserts and removals (a removal moves the last position, whose codes
/// may be in the file, into the removed one's), and writes a file of its own that reads back
/// the same. An index that wrote its file adopts it, unless it changed since.
#[test]
fn int8_codes_left_in_the_file_answer_as_codes_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let stamp = crate::cache_file::Stamp { schema: 7, epoch: 1, nonce: 3 };
    let write = |index: &Index, name: &str| {
        let path = dir.path().join(name);
        let file = crate::cache_file::write(&path, stamp, "k", |e| index.encode(e)).unwrap().commit().unwrap();
        (path, file, index.version())
    };
    let read = |path: &std::path::Path| {
        crate::cache_file::read(path, stamp, "k", |d| Index::decode(d, 48, Some(Precision::Int8), 0)).unwrap()
    };
    let same = |a: &Index, b: &Index| {
        for q in [3u64, 70, 299, 1 << 40, 5_000] {
            assert_eq!(a.candidates(&unit(q, 48), 10, 16).unwrap(), b.candidates(&unit(q, 48), 10, 16).unwrap());
        }
    };
    let mut memory = Index::with_capacity(48, Precision::Int8, 0);
    memory.keep_codes_in_file_from(0);
    for id in 1..=300 {
        memory.upsert(id, &unit(id as u64, 48));
    }
    let (path, _, _) = write(&memory, "a.cache");
    let mut on_file = read(&path);
    assert!(on_file.codes_on_file() && !memory.codes_on_file());
    same(&memory, &on_file);
    for index in [&mut memory, &mut on_file] {
        index.upsert(5_000, &unit(5_000, 48));
        index.upsert(70, &unit(71, 48));
        index.remove(3);
        index.remove(299);
        index.remove(5_000);
        index.upsert(1 << 40, &unit(1 << 40, 48));
    }
    same(&memory, &on_file);
    let (again, _, _) = write(&on_file, "b.cache");
    same(&memory, &read(&again));

    let (path, file, version) = write(&memory, "c.cache");
    memory.adopt_file(version, file, &path);
    assert!(memory.codes_on_file(), "the file written from this very state is adopted");
    same(&memory, &on_file);
    // Another index, written since in a state of its own, does not take the first file.
    let (path, _, version) = write(&on_file, "f.cache");
    let mut other = read(&again);
    write(&other, "g.cache");
    other.adopt_file(version, std::fs::File::open(&path).unwrap(), &path);
    assert_eq!(other.codes_file(), Some(again.clone()), "kept its own file");
    let mut changed = Index::with_capacity(48, Precision::Int8, 0);
    changed.keep_codes_in_file_from(0);
    changed.upsert(1, &unit(1, 48));
    let (path, file, version) = write(&changed, "d.cache");
    changed.upsert(2, &unit(2, 48));
    changed.adopt_file(version, file, &path);
    assert!(!changed.codes_on_file(), "changed since it was written: the file lacks the change");
    // A file cut short under an index that reads from it: a removal cannot move the last
    // codes, and the index refuses to search or to write a file until it is loaded again.
    let (path, _, _) = write(&memory, "h.cache");
    let mut cut = read(&path);
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(100).unwrap();
    cut.remove(1);
    assert!(cut.candidates(&unit(3, 48), 10, 16).is_err());
    assert!(crate::cache_file::write(&dir.path().join("i.cache"), stamp, "k", |e| cut.encode(e)).is_err());
    let mut small = Index::with_capacity(48, Precision::Int8, 0);
    small.keep_codes_in_file_from(2);
    small.upsert(1, &unit(1, 48));
    let (path, file, version) = write(&small, "e.cache");
    small.adopt_file(version, file, &path);
    assert!(!small.codes_on_file(), "below the size from which codes stay in the file");
    assert!(!crate::cache_file::read(&path, stamp, "k", |d| Index::decode(d, 48, None, 2)).unwrap().codes_on_file());
}

#[test]
fn int8_scores_stay_within_a_percent_and_find_the_same_vector() {
    let mut exact = Index::with_capacity(48, Precision::F32, 0);
    let mut coarse = Index::with_capacity(48, Precision::Int8, 0);
    for id in 1..=500 {
        exact.upsert(id, &unit(id as u64, 48));
        coarse.upsert(id, &unit(id as u64, 48));
    }
    coarse.remove(3);
    exact.remove(3);
    for q in [7u64, 77, 499] {
        let (e, c) = (exact.candidates(&unit(q, 48), 5, 16).unwrap(), coarse.candidates(&unit(q, 48), 5, 16).unwrap());
        assert_eq!(e[0].0, c[0].0);
        let exact_of: HashMap<i64, f32> = e.iter().copied().collect();
        for (id, score) in c.iter().filter(|(id, _)| exact_of.contains_key(id)) {
            assert!((score - exact_of[id]).abs() < 0.01, "{id}: {score} vs {}", exact_of[id]);
        }
    }
}

#[test]
fn positions_hold_dense_and_far_ids_alike() {
    let mut p = Positions::with_capacity(4);
    let far = [1i64 << 40, -5, 1 << 20];
    for (i, id) in [1i64, 2, 3].iter().chain(&far).enumerate() {
        p.insert(*id, i);
    }
    // The array grows past an id first placed in the map: it is still found, once.
    p.insert(70_000, 9);
    assert_eq!(p.get(70_000), Some(9));
    for i in 0..1_100_000 {
        if 10 + i != 1 << 20 {
            p.insert(10 + i, 100 + i as usize);
        }
    }
    assert!(p.dense.len() > 1 << 20, "the array now covers both ids first placed in the map");
    assert_eq!(p.get(70_000), Some(100 + 69_990), "updated where it lives, not duplicated");
    assert_eq!(p.get(1 << 20), Some(5));
    p.insert(1 << 20, 6);
    assert_eq!((p.get(1 << 20), p.get(-5), p.get(1 << 40), p.get(2)), (Some(6), Some(4), Some(3), Some(1)));
    assert_eq!(p.remove(1 << 20), Some(6));
    assert_eq!((p.get(1 << 20), p.remove(1 << 20), p.get(4)), (None, None, None));
}

#[test]
fn the_mean_is_kept_in_step_with_every_change() {
    for precision in [Precision::F32, Precision::Int8] {
        let mut index = Index::with_capacity(16, precision, 0);
        assert_eq!(index.mean().unwrap(), None);
        let vectors: Vec<Vec<f32>> = (0..20).map(|i| unit(i, 16)).collect();
        for (i, v) in vectors.iter().enumerate() {
            index.upsert(i as i64 + 1, v);
        }
        let exact = |kept: &[&Vec<f32>]| -> Vec<f32> {
            (0..16).map(|d| kept.iter().map(|v| v[d]).sum::<f32>() / kept.len() as f32).collect()
        };
        let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 0.01);
        assert!(close(&index.mean().unwrap().unwrap(), &exact(&vectors.iter().collect::<Vec<_>>())));
        // Replaced and removed after the first mean: kept in step, not counted again.
        index.upsert(1, &vectors[5]);
        index.remove(20);
        index.remove(3);
        let mut kept: Vec<&Vec<f32>> = vectors[1..19].iter().collect();
        kept.remove(1);
        kept.push(&vectors[5]);
        assert!(close(&index.mean().unwrap().unwrap(), &exact(&kept)), "{precision:?}");
    }
}

#[test]
fn finds_the_exact_vector_and_survives_removal() {
    let mut index = Index::with_capacity(48, Precision::F32, 0);
    for id in 1..=500 {
        index.upsert(id, &unit(id as u64, 48));
    }
    let top =
        |index: &Index, q: u64| index.candidates(&unit(q, 48), 5, 16).unwrap().iter().map(|c| c.0).collect::<Vec<_>>();
    assert_eq!(top(&index, 77)[0], 77);
    assert!((index.candidates(&unit(77, 48), 5, 16).unwrap()[0].1 - 1.0).abs() < 1e-5, "exact cosine");
    index.remove(77);
    index.remove(500);
    assert_eq!(index.len(), 498);
    assert!(!top(&index, 77).contains(&77));
    assert_eq!(top(&index, 499)[0], 499, "the moved last row is still found");
    index.upsert(499, &unit(3, 48));
    assert_eq!(top(&index, 3)[..2].iter().filter(|id| **id == 499 || **id == 3).count(), 2);
}
