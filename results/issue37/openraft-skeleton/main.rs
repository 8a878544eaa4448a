// openraft 0.9.25 features=["serde","storage-v2"]; deps: tokio(full), serde(derive), serde_json
use std::collections::BTreeMap;
use std::io::{self, Cursor};
use std::sync::{Arc, Mutex};
use std::{fmt::Debug, ops::RangeBounds, time::Duration};

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{AppendEntriesRequest as AeReq, AppendEntriesResponse as AeResp, InstallSnapshotRequest as IsReq,
                     InstallSnapshotResponse as IsResp, VoteRequest, VoteResponse};
use openraft::storage::{LogFlushed, RaftLogStorage, RaftStateMachine};
use openraft::{BasicNode, Config, Entry, EntryPayload, LogId, LogState, OptionalSend, Raft, RaftLogReader,
               RaftSnapshotBuilder, ServerState, Snapshot, SnapshotMeta, StorageError, StorageIOError,
               StoredMembership, Vote};

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Req { pub key: String, pub value: String }
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Resp { pub prev: Option<String> }

openraft::declare_raft_types!(pub TC: D = Req, R = Resp, NodeId = u64, Node = BasicNode, Entry = Entry<TC>,
                              SnapshotData = Cursor<Vec<u8>>, AsyncRuntime = openraft::TokioRuntime);
type NID = u64;
type SErr = StorageError<NID>;
type Meta = SnapshotMeta<NID, BasicNode>;

#[derive(Default)]
struct LogInner { vote: Option<Vote<NID>>, committed: Option<LogId<NID>>, purged: Option<LogId<NID>>,
                  log: BTreeMap<u64, Entry<TC>> }
#[derive(Clone, Default)] // std Mutex is fine as long as no guard lives across an .await (futures must be Send)
pub struct LogStore(Arc<Mutex<LogInner>>);

impl RaftLogReader<TC> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(&mut self, range: RB)
        -> Result<Vec<Entry<TC>>, SErr> {
        Ok(self.0.lock().unwrap().log.range(range).map(|(_, e)| e.clone()).collect())
    }
}
impl RaftLogStorage<TC> for LogStore {
    type LogReader = Self;
    async fn get_log_state(&mut self) -> Result<LogState<TC>, SErr> {
        let s = self.0.lock().unwrap();
        let last = s.log.values().next_back().map(|e| e.log_id).or(s.purged);
        Ok(LogState { last_purged_log_id: s.purged, last_log_id: last })
    }
    async fn get_log_reader(&mut self) -> Self::LogReader { self.clone() }
    async fn save_vote(&mut self, v: &Vote<NID>) -> Result<(), SErr> { self.0.lock().unwrap().vote = Some(*v); Ok(()) }
    async fn read_vote(&mut self) -> Result<Option<Vote<NID>>, SErr> { Ok(self.0.lock().unwrap().vote) }
    async fn save_committed(&mut self, c: Option<LogId<NID>>) -> Result<(), SErr> { self.0.lock().unwrap().committed = c; Ok(()) }
    async fn read_committed(&mut self) -> Result<Option<LogId<NID>>, SErr> { Ok(self.0.lock().unwrap().committed) }
    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TC>) -> Result<(), SErr>
    where I: IntoIterator<Item = Entry<TC>> + OptionalSend, I::IntoIter: OptionalSend {
        let mut s = self.0.lock().unwrap();
        for e in entries { s.log.insert(e.log_id.index, e); }
        callback.log_io_completed(Ok(())); // durable now; calling it before returning is allowed
        Ok(())
    }
    async fn truncate(&mut self, log_id: LogId<NID>) -> Result<(), SErr> { // remove [log_id.index, ..)
        self.0.lock().unwrap().log.split_off(&log_id.index); Ok(())
    }
    async fn purge(&mut self, log_id: LogId<NID>) -> Result<(), SErr> { // remove (.., log_id.index]
        let mut s = self.0.lock().unwrap();
        s.purged = Some(log_id);
        s.log = s.log.split_off(&(log_id.index + 1));
        Ok(())
    }
}

#[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
struct SmData { last_applied: Option<LogId<NID>>, membership: StoredMembership<NID, BasicNode>, kv: BTreeMap<String, String> }
#[derive(Clone, Default)]
pub struct StateMachine { data: Arc<Mutex<SmData>>, snap: Arc<Mutex<Option<(Meta, Vec<u8>)>>> }

impl RaftSnapshotBuilder<TC> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TC>, SErr> {
        let d = self.data.lock().unwrap().clone();
        let bytes = serde_json::to_vec(&d).map_err(|e| StorageIOError::read_state_machine(&e))?;
        let meta = Meta { last_log_id: d.last_applied, last_membership: d.membership.clone(),
                          snapshot_id: d.last_applied.map(|l| l.index).unwrap_or(0).to_string() };
        *self.snap.lock().unwrap() = Some((meta.clone(), bytes.clone()));
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(bytes)) })
    }
}
impl RaftStateMachine<TC> for StateMachine {
    type SnapshotBuilder = Self;
    async fn applied_state(&mut self) -> Result<(Option<LogId<NID>>, StoredMembership<NID, BasicNode>), SErr> {
        let d = self.data.lock().unwrap();
        Ok((d.last_applied, d.membership.clone()))
    }
    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Resp>, SErr>
    where I: IntoIterator<Item = Entry<TC>> + OptionalSend, I::IntoIter: OptionalSend {
        let mut d = self.data.lock().unwrap();
        let mut out = Vec::new(); // exactly one response per entry, incl. Blank/Membership
        for e in entries {
            d.last_applied = Some(e.log_id);
            let prev = match e.payload {
                EntryPayload::Blank => None,
                EntryPayload::Normal(r) => d.kv.insert(r.key, r.value),
                EntryPayload::Membership(m) => { d.membership = StoredMembership::new(Some(e.log_id), m); None }
            };
            out.push(Resp { prev });
        }
        Ok(out)
    }
    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder { self.clone() }
    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, SErr> { Ok(Box::new(Cursor::new(vec![]))) }
    async fn install_snapshot(&mut self, meta: &Meta, snapshot: Box<Cursor<Vec<u8>>>) -> Result<(), SErr> {
        let bytes = snapshot.into_inner();
        let d: SmData = serde_json::from_slice(&bytes)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        *self.data.lock().unwrap() = d;
        *self.snap.lock().unwrap() = Some((meta.clone(), bytes));
        Ok(())
    }
    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TC>>, SErr> {
        let s = self.snap.lock().unwrap().clone();
        Ok(s.map(|(meta, b)| Snapshot { meta, snapshot: Box::new(Cursor::new(b)) }))
    }
}

pub struct Net; // network stub: a single node never sends RPCs
fn unreach<E: std::error::Error>() -> RPCError<NID, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(&io::Error::new(io::ErrorKind::NotConnected, "no network")))
}
impl RaftNetworkFactory<TC> for Net {
    type Network = Net;
    async fn new_client(&mut self, _target: NID, _node: &BasicNode) -> Self::Network { Net }
}
impl RaftNetwork<TC> for Net {
    async fn append_entries(&mut self, _: AeReq<TC>, _: RPCOption)
        -> Result<AeResp<NID>, RPCError<NID, BasicNode, RaftError<NID>>> { Err(unreach()) }
    async fn install_snapshot(&mut self, _: IsReq<TC>, _: RPCOption)
        -> Result<IsResp<NID>, RPCError<NID, BasicNode, RaftError<NID, InstallSnapshotError>>> { Err(unreach()) }
    async fn vote(&mut self, _: VoteRequest<NID>, _: RPCOption)
        -> Result<VoteResponse<NID>, RPCError<NID, BasicNode, RaftError<NID>>> { Err(unreach()) }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config { cluster_name: "meta".into(), ..Default::default() }.validate()?;
    let raft = Raft::<TC>::new(1, Arc::new(config), Net, LogStore::default(), StateMachine::default()).await?;
    raft.initialize(BTreeMap::from([(1u64, BasicNode::new("127.0.0.1:9000"))])).await?;
    raft.wait(Some(Duration::from_secs(5))).state(ServerState::Leader, "become leader").await?;

    let resp = raft.client_write(Req { key: "a".into(), value: "1".into() }).await?;
    println!("client_write: log_id={} data={:?}", resp.log_id, resp.data);
    let rx = raft.client_write_ff(Req { key: "a".into(), value: "2".into() }).await?; // fire & forget
    let resp2 = rx.await??; // tokio oneshot::Receiver<Result<ClientWriteResponse<TC>, ClientWriteError<..>>>
    println!("client_write_ff: log_id={} data={:?}", resp2.log_id, resp2.data);

    let m = raft.metrics().borrow().clone();
    println!("term={} state={:?} leader={:?} last_log_index={:?} last_applied={:?}",
             m.current_term, m.state, m.current_leader, m.last_log_index, m.last_applied.map(|l| l.to_string()));
    raft.trigger().snapshot().await?;
    raft.shutdown().await?;
    Ok(())
}
