//! Recently written data kept in memory for reads (a write-through cache).
//!
//! Large writes go around the page cache (`O_DIRECT`, see [`crate::store`]), so without this cache reading
//! back what was just written would come from the device. The cache keeps the written payloads themselves
//! (no copy), up to a byte budget, least recently used out first; a read that the cached payloads cover
//! is answered from them.
//!
//! Every change to an object's bytes is bracketed by [`WriteCache::begin`] and [`WriteCache::finish`]:
//! `begin` drops the cached data the change overlaps, `finish` caches the new data. Two overlapping changes
//! in flight at once may reach the disk in either order, so neither is cached ("tainted"); the disk
//! then holds one of them and later reads go there. So a cached range always equals what the disk holds.

use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use tessera_proto::ObjectId;

/// The cache of one data server's store.
pub struct WriteCache {
    st: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Byte budget of the cached payloads.
    cap: u64,
    /// Per object: cached payloads by starting offset (non-overlapping).
    objects: HashMap<ObjectId, BTreeMap<u64, Entry>>,
    /// Least recently used first: tick → (object, offset).
    lru: BTreeMap<u64, (ObjectId, u64)>,
    bytes: u64,
    tick: u64,
    next_change: u64,
    /// Changes between `begin` and `finish`.
    pending: Vec<Pending>,
    hits: u64,
    misses: u64,
}

struct Entry {
    data: Bytes,
    tick: u64,
}

struct Pending {
    id: u64,
    object: ObjectId,
    start: u64,
    end: u64,
    tainted: bool,
}

/// A change announced with [`WriteCache::begin`]; pass it to [`WriteCache::finish`].
#[must_use]
pub struct Change(u64);

/// Counters for the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
}

impl WriteCache {
    /// A cache holding at most `cap` bytes of payloads (0: nothing is cached).
    pub fn new(cap: u64) -> WriteCache {
        WriteCache { st: Mutex::new(State { cap, ..State::default() }) }
    }

    /// Changes the budget, dropping the least recently used payloads that no longer fit.
    pub fn set_capacity(&self, cap: u64) {
        let mut st = self.state();
        st.cap = cap;
        st.evict_to_cap();
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Announces a change of `object`'s bytes in `start..end` (a write, a truncation: `size..u64::MAX`, a
    /// removal: `0..u64::MAX`): drops what the cache holds there.
    pub fn begin(&self, object: ObjectId, start: u64, end: u64) -> Change {
        let mut st = self.state();
        st.next_change += 1;
        let id = st.next_change;
        let mut tainted = false;
        for p in st.pending.iter_mut().filter(|p| p.object == object && p.start < end && start < p.end) {
            p.tainted = true;
            tainted = true;
        }
        st.pending.push(Pending { id, object, start, end, tainted });
        st.drop_range(object, start, end);
        Change(id)
    }

    /// Ends a change; `written` is the data now on disk at the change's start, to be cached (None if the
    /// change failed or is not worth caching).
    pub fn finish(&self, change: Change, written: Option<Bytes>) {
        let mut st = self.state();
        let Some(i) = st.pending.iter().position(|p| p.id == change.0) else { return };
        let p = st.pending.swap_remove(i);
        let Some(data) = written else { return };
        let len = data.len() as u64;
        if p.tainted || len == 0 || len > st.cap || p.start.checked_add(len) != Some(p.end) {
            return;
        }
        st.tick += 1;
        let tick = st.tick;
        st.objects.entry(p.object).or_default().insert(p.start, Entry { data, tick });
        st.lru.insert(tick, (p.object, p.start));
        st.bytes += len;
        st.evict_to_cap();
    }

    /// `len` bytes at `offset` if cached payloads cover all of them.
    pub fn read(&self, object: ObjectId, offset: u64, len: usize) -> Option<Bytes> {
        let end = offset.checked_add(len as u64)?;
        let mut st = self.state();
        let st = &mut *st;
        let found = st.objects.get(&object).and_then(|entries| {
            let mut pieces = Vec::new();
            let mut at = offset;
            let (&first, _) = entries.range(..=offset).next_back()?;
            for (&start, e) in entries.range(first..) {
                let e_end = start + e.data.len() as u64;
                if start > at || at >= end {
                    break;
                }
                if e_end > at {
                    let to = e_end.min(end);
                    pieces.push((start, e.data.slice((at - start) as usize..(to - start) as usize)));
                    at = to;
                }
            }
            (at >= end && len > 0).then_some(pieces)
        });
        let Some(pieces) = found else {
            st.misses += 1;
            return None;
        };
        st.hits += 1;
        for &(start, _) in &pieces {
            st.touch(object, start);
        }
        Some(tessera_proto::frame::concat(pieces.into_iter().map(|(_, b)| b).collect()))
    }

    pub fn stats(&self) -> CacheStats {
        let st = self.state();
        CacheStats { bytes: st.bytes, hits: st.hits, misses: st.misses }
    }
}

impl State {
    fn evict_to_cap(&mut self) {
        while self.bytes > self.cap {
            let Some((_, (object, offset))) = self.lru.pop_first() else { break };
            self.remove_entry(object, offset);
        }
    }

    /// Drops the entries of `object` that overlap `start..end`.
    fn drop_range(&mut self, object: ObjectId, start: u64, end: u64) {
        let Some(entries) = self.objects.get(&object) else { return };
        let from = entries.range(..=start).next_back().map(|(&k, _)| k).unwrap_or(start);
        let hit: Vec<u64> = entries
            .range(from..)
            .take_while(|(&k, _)| k < end)
            .filter(|(&k, e)| k + e.data.len() as u64 > start)
            .map(|(&k, _)| k)
            .collect();
        for k in hit {
            self.remove_entry(object, k);
        }
    }

    fn remove_entry(&mut self, object: ObjectId, offset: u64) {
        let Some(entries) = self.objects.get_mut(&object) else { return };
        if let Some(e) = entries.remove(&offset) {
            self.lru.remove(&e.tick);
            self.bytes -= e.data.len() as u64;
        }
        if entries.is_empty() {
            self.objects.remove(&object);
        }
    }

    fn touch(&mut self, object: ObjectId, offset: u64) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(e) = self.objects.get_mut(&object).and_then(|m| m.get_mut(&offset)) {
            self.lru.remove(&e.tick);
            e.tick = tick;
            self.lru.insert(tick, (object, offset));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(seed: u8, n: usize) -> Bytes {
        Bytes::from((0..n).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect::<Vec<_>>())
    }

    fn write(c: &WriteCache, object: ObjectId, offset: u64, data: &Bytes) {
        let ch = c.begin(object, offset, offset + data.len() as u64);
        c.finish(ch, Some(data.clone()));
    }

    #[test]
    fn reads_what_was_written_within_and_across_entries() {
        let c = WriteCache::new(1 << 20);
        let (a, b) = (bytes(1, 1000), bytes(2, 500));
        write(&c, 1, 0, &a);
        write(&c, 1, 1000, &b);
        assert_eq!(c.read(1, 10, 20).unwrap(), a.slice(10..30));
        let across = c.read(1, 900, 300).unwrap();
        assert_eq!(&across[..100], &a[900..]);
        assert_eq!(&across[100..], &b[..200]);
        assert!(c.read(1, 1400, 200).is_none(), "past the cached end");
        assert!(c.read(2, 0, 10).is_none(), "another object");
        assert!(c.read(1, 0, 0).is_none());
        let s = c.stats();
        assert_eq!((s.bytes, s.hits, s.misses), (1500, 2, 3));
    }

    #[test]
    fn later_changes_drop_what_they_overlap() {
        let c = WriteCache::new(1 << 20);
        write(&c, 1, 0, &bytes(1, 1000));
        write(&c, 1, 1000, &bytes(2, 1000));
        // A small write (not cached) into the first entry drops it whole, the second stays.
        let ch = c.begin(1, 500, 510);
        c.finish(ch, None);
        assert!(c.read(1, 0, 10).is_none());
        assert_eq!(c.read(1, 1000, 1000).unwrap(), bytes(2, 1000));
        // A truncation below the second entry drops it.
        let ch = c.begin(1, 1500, u64::MAX);
        c.finish(ch, None);
        assert!(c.read(1, 1000, 10).is_none());
        assert_eq!(c.stats().bytes, 0);
        // A failed write caches nothing.
        let ch = c.begin(3, 0, 100);
        c.finish(ch, None);
        assert!(c.read(3, 0, 100).is_none());
    }

    #[test]
    fn overlapping_changes_in_flight_are_not_cached() {
        let c = WriteCache::new(1 << 20);
        let (a, b) = (bytes(1, 100), bytes(2, 100));
        let first = c.begin(1, 0, 100);
        let second = c.begin(1, 50, 150);
        let apart = c.begin(1, 200, 300);
        c.finish(second, Some(b));
        c.finish(first, Some(a));
        c.finish(apart, Some(bytes(3, 100)));
        assert!(c.read(1, 0, 10).is_none() && c.read(1, 60, 10).is_none());
        assert_eq!(c.read(1, 200, 100).unwrap(), bytes(3, 100), "a disjoint change still caches");
        // A removal in flight taints a write that started after it.
        let removal = c.begin(1, 0, u64::MAX);
        assert!(c.read(1, 200, 100).is_none());
        let w = c.begin(1, 0, 100);
        c.finish(removal, None);
        c.finish(w, Some(bytes(4, 100)));
        assert!(c.read(1, 0, 100).is_none());
    }

    #[test]
    fn least_recently_used_goes_first_within_the_budget() {
        let c = WriteCache::new(3000);
        for k in 0..3u64 {
            write(&c, 1, k * 1000, &bytes(k as u8, 1000));
        }
        assert!(c.read(1, 0, 1000).is_some(), "touch the first");
        write(&c, 2, 0, &bytes(9, 1000));
        assert!(c.read(1, 1000, 1000).is_none(), "the least recently used went");
        assert!(c.read(1, 0, 1000).is_some() && c.read(1, 2000, 1000).is_some());
        assert_eq!(c.stats().bytes, 3000);
        write(&c, 3, 0, &bytes(1, 4000));
        assert!(c.read(3, 0, 10).is_none(), "larger than the whole budget");
        assert!(WriteCache::new(0).read(1, 0, 1).is_none());
    }
}
