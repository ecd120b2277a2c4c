package bridge

import (
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
	grpccodes "google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"github.com/mcm-rs/machine-controller-manager/provider-go/driverpb"
)

// toGRPC encodes a driver error as the contract's gRPC status.
//
// The machine code is read the way upstream's machine-controller reads it (status.FromError):
// a machinecodes status keeps its code; any other error whose text has upstream's
// "code = [Code] message = [text]" form is parsed; everything else is Unknown with the error's
// text (a gRPC status returned by a driver too, as upstream reads it). The message is
// upstream's message unchanged. The code travels twice: as the gRPC code
// (the same number for 1..16) and in a MachineErrorDetail, which alone can carry
// Uninitialized (17, outside gRPC's range).
func toGRPC(err error) error {
	if err == nil {
		return nil
	}
	machineStatus, _ := status.FromError(err)
	code := machineStatus.Code()
	if code == codes.OK {
		// An error that says OK is still an error.
		code = codes.Unknown
	}
	detail := &driverpb.MachineErrorDetail{Code: int32(code), CodeName: code.String()} // #nosec G115 -- codes are 0..17
	encoded, detailErr := grpcstatus.New(grpcCode(code), machineStatus.Message()).WithDetails(protoadapt.MessageV1Of(detail))
	if detailErr != nil {
		return grpcstatus.Error(grpcCode(code), machineStatus.Message())
	}
	return encoded.Err()
}

// grpcCode is the gRPC code of a machine code: the same number, but Uninitialized, which gRPC
// lacks, travels as FailedPrecondition (its detail says Uninitialized).
func grpcCode(code codes.Code) grpccodes.Code {
	if code == codes.Uninitialized {
		return grpccodes.FailedPrecondition
	}
	return grpccodes.Code(code) // #nosec G115 -- codes are 0..17
}

// withStatusResponse adds a GetMachineStatus answer to an error status, as the contract carries
// the response that comes with Uninitialized.
func withStatusResponse(err error, response *driverpb.GetMachineStatusResponse) error {
	encoded, ok := grpcstatus.FromError(err)
	if !ok {
		return err
	}
	withResponse, detailErr := encoded.WithDetails(protoadapt.MessageV1Of(response))
	if detailErr != nil {
		return err
	}
	return withResponse.Err()
}
