//! The device model: how long the device takes beyond the real I/O.
//!
//! `none` serves requests as fast as the hardware allows. An emulated rotating disk (`hdd`) will add a
//! modelled seek + rotation + transfer delay computed from each request's address in the volume
//! (object base address + offset), which is why every device request is described by a [`DeviceOp`].

use std::time::Duration;
use tessera_proto::{FsError, FsResult, ObjectId};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Write,
    Fsync,
}

/// One request as the device sees it.
#[derive(Clone, Copy, Debug)]
pub struct DeviceOp {
    pub kind: OpKind,
    pub object: ObjectId,
    pub offset: u64,
    pub len: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceModel {
    /// Real I/O only.
    None,
}

impl DeviceModel {
    /// Parses `ds_options.device_model`.
    pub fn parse(s: &str) -> FsResult<DeviceModel> {
        match s {
            "none" | "" => Ok(DeviceModel::None),
            "hdd" => Err(FsError::new(
                tessera_proto::error::ErrorCode::Unsupported,
                "device model 'hdd' is not implemented in this data server yet (use 'none')",
            )),
            other => Err(FsError::invalid(format!("unknown device model '{other}' (none, hdd)"))),
        }
    }

    /// Extra service time the model adds to `op` after the real I/O.
    pub fn delay(&self, _op: &DeviceOp) -> Duration {
        match self {
            DeviceModel::None => Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_models() {
        assert_eq!(DeviceModel::parse("none").unwrap(), DeviceModel::None);
        assert!(DeviceModel::parse("hdd").is_err());
        assert!(DeviceModel::parse("floppy").is_err());
        let op = DeviceOp { kind: OpKind::Read, object: 1, offset: 0, len: 4096 };
        assert_eq!(DeviceModel::None.delay(&op), Duration::ZERO);
    }
}
