package bridge

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"

	"github.com/gardener/machine-controller-manager/pkg/util/provider/driver"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"

	"github.com/mcm-rs/machine-controller-manager/provider-go/driverpb"
)

// The methods every upstream driver has. UpdateMachine is not among them: upstream's interface
// has no in-place update, so the manager replaces machines on a class change, as upstream does.
var upstreamMethods = []driverpb.Method{
	driverpb.Method_METHOD_CREATE_MACHINE,
	driverpb.Method_METHOD_INITIALIZE_MACHINE,
	driverpb.Method_METHOD_DELETE_MACHINE,
	driverpb.Method_METHOD_GET_MACHINE_STATUS,
	driverpb.Method_METHOD_LIST_MACHINES,
	driverpb.Method_METHOD_GET_VOLUME_IDS,
}

type server struct {
	driverpb.UnimplementedDriverServer
	driver  driver.Driver
	options Options
	logger  *slog.Logger
	// initializeUnimplemented is set once the driver answered InitializeMachine with
	// Unimplemented (or the options said so).
	initializeUnimplemented atomic.Bool
}

// NewServer returns the contract's service for drv, to register on a gRPC server of one's own
// (Serve does this for the common case).
func NewServer(drv driver.Driver, options Options) driverpb.DriverServer {
	logger := options.Logger
	if logger == nil {
		logger = slog.Default()
	}
	s := &server{driver: drv, options: options, logger: logger}
	s.initializeUnimplemented.Store(options.InitializeMachineUnimplemented)
	return s
}

func (s *server) GetCapabilities(context.Context, *driverpb.GetCapabilitiesRequest) (*driverpb.GetCapabilitiesResponse, error) {
	methods := make([]driverpb.Method, 0, len(upstreamMethods))
	for _, method := range upstreamMethods {
		if method == driverpb.Method_METHOD_INITIALIZE_MACHINE && s.initializeUnimplemented.Load() {
			continue
		}
		methods = append(methods, method)
	}
	return &driverpb.GetCapabilitiesResponse{
		ProviderName:  s.options.ProviderName,
		Methods:       methods,
		DriverVersion: s.options.DriverVersion,
	}, nil
}

func (s *server) CreateMachine(ctx context.Context, in *driverpb.CreateMachineRequest) (out *driverpb.CreateMachineResponse, err error) {
	defer s.finish("CreateMachine", &err)
	objects, err := decodeObjects(in.GetMachine(), in.GetMachineClass(), in.GetSecret(), true)
	if err != nil {
		return nil, err
	}
	response, err := s.driver.CreateMachine(ctx, &driver.CreateMachineRequest{
		Machine: objects.machine, MachineClass: objects.class, Secret: objects.secret,
	})
	if err != nil {
		return nil, err
	}
	if response == nil {
		return nil, status.Error(codes.Internal, "the driver returned neither a response nor an error")
	}
	return &driverpb.CreateMachineResponse{
		ProviderId:     response.ProviderID,
		NodeName:       response.NodeName,
		LastKnownState: response.LastKnownState,
		Addresses:      encodeAddresses(response.Addresses),
	}, nil
}

func (s *server) InitializeMachine(ctx context.Context, in *driverpb.InitializeMachineRequest) (out *driverpb.InitializeMachineResponse, err error) {
	defer s.finish("InitializeMachine", &err)
	objects, err := decodeObjects(in.GetMachine(), in.GetMachineClass(), in.GetSecret(), true)
	if err != nil {
		return nil, err
	}
	response, err := s.driver.InitializeMachine(ctx, &driver.InitializeMachineRequest{
		Machine: objects.machine, MachineClass: objects.class, Secret: objects.secret,
	})
	if err != nil {
		if machineStatus, _ := status.FromError(err); machineStatus.Code() == codes.Unimplemented {
			s.initializeUnimplemented.Store(true)
		}
		return nil, err
	}
	if response == nil {
		return &driverpb.InitializeMachineResponse{}, nil
	}
	return &driverpb.InitializeMachineResponse{
		ProviderId: response.ProviderID,
		NodeName:   response.NodeName,
		Addresses:  encodeAddresses(response.Addresses),
	}, nil
}

func (s *server) DeleteMachine(ctx context.Context, in *driverpb.DeleteMachineRequest) (out *driverpb.DeleteMachineResponse, err error) {
	defer s.finish("DeleteMachine", &err)
	objects, err := decodeObjects(in.GetMachine(), in.GetMachineClass(), in.GetSecret(), true)
	if err != nil {
		return nil, err
	}
	response, err := s.driver.DeleteMachine(ctx, &driver.DeleteMachineRequest{
		Machine: objects.machine, MachineClass: objects.class, Secret: objects.secret,
	})
	if err != nil {
		return nil, err
	}
	if response == nil {
		return &driverpb.DeleteMachineResponse{}, nil
	}
	return &driverpb.DeleteMachineResponse{LastKnownState: response.LastKnownState}, nil
}

func (s *server) GetMachineStatus(ctx context.Context, in *driverpb.GetMachineStatusRequest) (out *driverpb.GetMachineStatusResponse, err error) {
	var response *driver.GetMachineStatusResponse
	defer func() {
		// Upstream's controller reads the response that comes with Uninitialized (the VM exists
		// but is not initialised): it travels in the status details.
		if err != nil && response != nil {
			err = withStatusResponse(err, encodeStatusResponse(response))
		}
	}()
	defer s.finish("GetMachineStatus", &err)
	objects, err := decodeObjects(in.GetMachine(), in.GetMachineClass(), in.GetSecret(), true)
	if err != nil {
		return nil, err
	}
	response, err = s.driver.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{
		Machine: objects.machine, MachineClass: objects.class, Secret: objects.secret,
	})
	if err != nil {
		return nil, err
	}
	if response == nil {
		return nil, status.Error(codes.Internal, "the driver returned neither a response nor an error")
	}
	return encodeStatusResponse(response), nil
}

func (s *server) ListMachines(ctx context.Context, in *driverpb.ListMachinesRequest) (out *driverpb.ListMachinesResponse, err error) {
	defer s.finish("ListMachines", &err)
	objects, err := decodeObjects(nil, in.GetMachineClass(), in.GetSecret(), false)
	if err != nil {
		return nil, err
	}
	response, err := s.driver.ListMachines(ctx, &driver.ListMachinesRequest{
		MachineClass: objects.class, Secret: objects.secret,
	})
	if err != nil {
		return nil, err
	}
	if response == nil {
		return &driverpb.ListMachinesResponse{}, nil
	}
	return &driverpb.ListMachinesResponse{MachineList: response.MachineList}, nil
}

func (s *server) GetVolumeIDs(ctx context.Context, in *driverpb.GetVolumeIDsRequest) (out *driverpb.GetVolumeIDsResponse, err error) {
	defer s.finish("GetVolumeIDs", &err)
	specs, err := decodeVolumeSpecs(in.GetPvSpecs())
	if err != nil {
		return nil, err
	}
	response, err := s.driver.GetVolumeIDs(ctx, &driver.GetVolumeIDsRequest{PVSpecs: specs})
	if err != nil {
		return nil, err
	}
	if response == nil {
		return &driverpb.GetVolumeIDsResponse{}, nil
	}
	return &driverpb.GetVolumeIDsResponse{VolumeIds: response.VolumeIDs}, nil
}

// UpdateMachine is not part of upstream's interface: Unimplemented, which (with the method
// missing from GetCapabilities) makes the manager roll machines instead of updating them.
func (s *server) UpdateMachine(context.Context, *driverpb.UpdateMachineRequest) (*driverpb.UpdateMachineResponse, error) {
	return nil, toGRPC(status.Error(codes.Unimplemented, "UpdateMachine is not part of upstream's driver interface: machines are replaced on a class change"))
}

// ValidateMachineClass is not part of upstream's interface either: Unimplemented (and not listed
// in GetCapabilities), so the manager records nothing on the class and a bad providerSpec shows
// at CreateMachine, as with upstream.
func (s *server) ValidateMachineClass(context.Context, *driverpb.ValidateMachineClassRequest) (*driverpb.ValidateMachineClassResponse, error) {
	return nil, toGRPC(status.Error(codes.Unimplemented, "ValidateMachineClass is not part of upstream's driver interface"))
}

// finish turns a panic of the wrapped driver into an Internal error (one bad request must not
// take every machine's driver down) and every error into the contract's gRPC status.
func (s *server) finish(method string, err *error) {
	if recovered := recover(); recovered != nil {
		s.logger.Error("the driver panicked", "method", method, "panic", recovered, "stack", string(debug.Stack()))
		*err = status.Error(codes.Internal, fmt.Sprintf("the driver panicked in %s: %v", method, recovered))
	}
	if *err != nil {
		s.logger.Info("driver call failed", "method", method, "error", *err)
		*err = toGRPC(*err)
	}
}
