//! Composite (progressive) layouts on a cluster of real processes: `tessera setstripe -E` on a
//! directory, a file written through the library across an extent boundary, the second extent placed
//! only once the file reaches it (on targets the first does not use), `getstripe` and the
//! `tessera.layout` attribute showing it, and the bytes read back intact — also by a client that opened
//! the file before the extent existed.

use bytes::Bytes;
use tessera_client::OpenOptions;
use tessera_proto::config::Defaults;
use tessera_test_support::{pattern, Cluster};

fn tessera(cluster: &Cluster, args: &[&str]) -> String {
    tessera_test_support::up::tessera_ok(&cluster.files.client_config, args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_composite_layout_places_its_second_extent_when_the_file_reaches_it() {
    let defaults = Defaults {
        stripe_size: 64 << 10,
        stripe_count: 1,
        placement: tessera_proto::config::Placement::RoundRobin,
        mirrors: 1,
    };
    let cluster = Cluster::start_with(3, defaults);
    let c = cluster.client().await;
    c.mkdir("/pfl", 0o755).await.unwrap();
    tessera(&cluster, &["setstripe", "-E", "1M", "-c", "1", "-E", "-1", "-c", "2", "/pfl"]);
    let dir = tessera(&cluster, &["getstripe", "/pfl"]);
    assert!(dir.contains("composite layout, 2 extents") && dir.contains("[1.0 MiB, EOF)"), "{dir}");

    // Inside the first extent only: the second has no objects.
    let data = pattern(1, 3 << 20);
    let f = c.create("/pfl/f", 0o644, None).await.unwrap();
    f.write_at(0, Bytes::copy_from_slice(&data[..768 << 10])).await.unwrap();
    f.close().await.unwrap();
    let l = c.get_layout("/pfl/f").await.unwrap();
    assert_eq!((l.extent_count(), l.targets.len(), l.instantiated_end()), (2, 1, 1 << 20), "{l:?}");
    assert!(l.extents[0].targets.is_empty());
    let shown = tessera(&cluster, &["getstripe", "/pfl/f"]);
    assert!(shown.contains("2 extents, 1 instantiated") && shown.contains("not instantiated"), "{shown}");

    // A reader that opens now, before the second extent exists.
    let early = cluster.client().await;
    let reader = early.open("/pfl/f", OpenOptions::read_only()).await.unwrap();
    assert!(!reader.layout().extents.is_empty() && reader.layout().extents[0].targets.is_empty());

    // One write across the boundary, up to 3 MiB: the second extent is placed, on the other two servers.
    let w = c.open("/pfl/f", OpenOptions::read_write()).await.unwrap();
    w.write_at(768 << 10, Bytes::copy_from_slice(&data[768 << 10..])).await.unwrap();
    w.close().await.unwrap();
    let l = c.get_layout("/pfl/f").await.unwrap();
    assert_eq!(l.extents[0].targets.len(), 2, "{l:?}");
    let mut servers: Vec<u32> = l.all_targets().map(|t| t.ds).collect();
    servers.sort_unstable();
    servers.dedup();
    assert_eq!(servers.len(), 3, "distinct targets across the extents: {l:?}");
    let shown = tessera(&cluster, &["getstripe", "/pfl/f"]);
    assert!(shown.contains("2 extents, 2 instantiated") && !shown.contains("not instantiated"), "{shown}");
    let attr = c.stat("/pfl/f").await.unwrap();
    let text = String::from_utf8(c.mds().getxattr(attr.ino, "tessera.layout").await.unwrap()).unwrap();
    assert!(text.starts_with("extent=0-1048576 ") && text.contains("extent=1048576-EOF"), "{text}");

    // Intact, through a fresh open and through the early reader (its layout is fetched again).
    assert_eq!(c.read_file("/pfl/f").await.unwrap(), data);
    let got = reader.read_at(0, 3 << 20).await.unwrap();
    assert!(got[..] == data[..], "the early reader read {} bytes, not the file", got.len());
    reader.close().await.unwrap();

    // Truncate down then up again: the tail reads as zeros; sizes hold across the extents.
    c.truncate("/pfl/f", (1 << 20) + 5).await.unwrap();
    c.truncate("/pfl/f", 2 << 20).await.unwrap();
    let back = c.read_file("/pfl/f").await.unwrap();
    assert_eq!(back.len(), 2 << 20);
    assert!(back[..(1 << 20) + 5] == data[..(1 << 20) + 5] && back[(1 << 20) + 5..].iter().all(|&b| b == 0));
}
