//! The [`Driver`] trait a Rust provider implements.
//!
//! Methods receive decoded inputs and return typed outputs; [`crate::serve`] turns an
//! implementation into the gRPC service. Optional methods default to `Unimplemented` (the
//! controller treats an unimplemented InitializeMachine as success). A call whose deadline expires
//! is cancelled: its future is dropped, so an implementation must leave consistent state at every
//! `.await` point.

use std::future::Future;

use crate::error::{MachineError, StatusError};
use crate::types::{
    Capabilities, ClassFieldErrors, CreateMachineResponse, DeleteMachineResponse,
    GetVolumeIdsRequest, InitializeMachineResponse, ListMachinesRequest, MachineList,
    MachineRequest, MachineStatus, UpdateMachineRequest, UpdateMachineResponse,
    ValidateMachineClassRequest,
};

/// A machine driver: creates, initialises, looks up, lists, updates and deletes the VMs of machines.
pub trait Driver: Send + Sync + 'static {
    /// The provider name, implemented methods and hot-updatable providerSpec paths.
    fn capabilities(&self) -> Capabilities;

    /// Creates the VM of `request.machine`; idempotent by machine name.
    fn create_machine(
        &self,
        request: MachineRequest,
    ) -> impl Future<Output = Result<CreateMachineResponse, MachineError>> + Send;

    /// Finishes the setup of a created VM.
    fn initialize_machine(
        &self,
        request: MachineRequest,
    ) -> impl Future<Output = Result<InitializeMachineResponse, MachineError>> + Send {
        let _ = request;
        async { Err(MachineError::unimplemented("InitializeMachine")) }
    }

    /// Deletes the VM of `request.machine`; OK if it is already gone.
    fn delete_machine(
        &self,
        request: MachineRequest,
    ) -> impl Future<Output = Result<DeleteMachineResponse, MachineError>> + Send;

    /// The VM of `request.machine`: `NotFound` if none, `Uninitialized` plus the status if it is not
    /// initialised yet.
    fn get_machine_status(
        &self,
        request: MachineRequest,
    ) -> impl Future<Output = Result<MachineStatus, StatusError>> + Send;

    /// providerID → machine name for exactly the VMs of `request.class`.
    fn list_machines(
        &self,
        request: ListMachinesRequest,
    ) -> impl Future<Output = Result<MachineList, MachineError>> + Send;

    /// Volume IDs of the given persistent volumes (volumes of other providers are left out).
    fn get_volume_ids(
        &self,
        request: GetVolumeIdsRequest,
    ) -> impl Future<Output = Result<Vec<String>, MachineError>> + Send {
        let _ = request;
        async { Err(MachineError::unimplemented("GetVolumeIDs")) }
    }

    /// Applies the hot-updatable parts of a changed providerSpec to a running VM.
    fn update_machine(
        &self,
        request: UpdateMachineRequest,
    ) -> impl Future<Output = Result<UpdateMachineResponse, MachineError>> + Send {
        let _ = request;
        async { Err(MachineError::unimplemented("UpdateMachine")) }
    }

    /// Checks a MachineClass as CreateMachine would read it, without creating anything: the
    /// invalid fields (empty when valid). A driver implementing it lists
    /// `Method::ValidateMachineClass` in its capabilities; it should use the very parser its
    /// CreateMachine uses, so the two never disagree.
    fn validate_machine_class(
        &self,
        request: ValidateMachineClassRequest,
    ) -> impl Future<Output = Result<ClassFieldErrors, MachineError>> + Send {
        let _ = request;
        async { Err(MachineError::unimplemented("ValidateMachineClass")) }
    }
}
