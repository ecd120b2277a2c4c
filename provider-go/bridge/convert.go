package bridge

import (
	"encoding/json"
	"fmt"

	"github.com/gardener/machine-controller-manager/pkg/apis/machine/v1alpha1"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/driver"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/mcm-rs/machine-controller-manager/provider-go/driverpb"
)

// objects are a request's Kubernetes objects in upstream's types.
type objects struct {
	machine *v1alpha1.Machine
	class   *v1alpha1.MachineClass
	secret  *corev1.Secret
}

// decodeObjects decodes the JSON of a request. The class is required (every upstream driver
// reads its providerSpec); the machine only when withMachine is set. An empty secret is an
// empty Secret, never nil: upstream's controller always hands drivers a Secret.
func decodeObjects(machine, class, secret []byte, withMachine bool) (objects, error) {
	var out objects
	if withMachine {
		if len(machine) == 0 {
			return out, status.Error(codes.InvalidArgument, "the request carries no machine")
		}
		out.machine = &v1alpha1.Machine{}
		if err := decode(machine, out.machine, "machine"); err != nil {
			return out, err
		}
	}
	if len(class) == 0 {
		return out, status.Error(codes.InvalidArgument, "the request carries no machine class")
	}
	out.class = &v1alpha1.MachineClass{}
	if err := decode(class, out.class, "machine class"); err != nil {
		return out, err
	}
	out.secret = &corev1.Secret{}
	if len(secret) > 0 {
		if err := decode(secret, out.secret, "secret"); err != nil {
			return out, err
		}
	}
	// The API server folds stringData into data; a Secret built by hand may still carry it.
	for key, value := range out.secret.StringData {
		if out.secret.Data == nil {
			out.secret.Data = map[string][]byte{}
		}
		out.secret.Data[key] = []byte(value)
	}
	out.secret.StringData = nil
	return out, nil
}

func decode(data []byte, into any, what string) error {
	if err := json.Unmarshal(data, into); err != nil {
		return status.Error(codes.InvalidArgument, fmt.Sprintf("decode the %s JSON: %v", what, err))
	}
	return nil
}

func decodeVolumeSpecs(specs [][]byte) ([]*corev1.PersistentVolumeSpec, error) {
	out := make([]*corev1.PersistentVolumeSpec, 0, len(specs))
	for i, data := range specs {
		spec := &corev1.PersistentVolumeSpec{}
		if err := decode(data, spec, fmt.Sprintf("persistent volume spec #%d", i)); err != nil {
			return nil, err
		}
		out = append(out, spec)
	}
	return out, nil
}

func encodeAddresses(addresses []corev1.NodeAddress) []*driverpb.NodeAddress {
	if len(addresses) == 0 {
		return nil
	}
	out := make([]*driverpb.NodeAddress, 0, len(addresses))
	for _, address := range addresses {
		out = append(out, &driverpb.NodeAddress{Type: string(address.Type), Address: address.Address})
	}
	return out
}

func encodeStatusResponse(response *driver.GetMachineStatusResponse) *driverpb.GetMachineStatusResponse {
	return &driverpb.GetMachineStatusResponse{
		ProviderId: response.ProviderID,
		NodeName:   response.NodeName,
		Addresses:  encodeAddresses(response.Addresses),
	}
}
