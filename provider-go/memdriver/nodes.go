package memdriver

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// LeaseNamespace holds the Nodes' Leases.
const LeaseNamespace = "kube-node-lease"

// ManagedLabel marks the Nodes this driver registered.
const ManagedLabel = "memory.provider.mcm.gardener.cloud/managed"

// How long one API call of a heartbeat may take.
const requestTimeout = 10 * time.Second

// At most this many heartbeat calls run at once.
const heartbeatWorkers = 16

// nodeClock is what the heartbeat remembers about one Node.
type nodeClock struct {
	registered bool
	// nodeUID owns the Lease, so that the garbage collector removes it with the Node.
	nodeUID    types.UID
	readySince time.Time
	lastLease  time.Time
	lastStatus time.Time
}

type nodeRegistry struct {
	driver *Driver
	mu     sync.Mutex
	clocks map[string]*nodeClock
}

func newNodeRegistry(d *Driver) *nodeRegistry {
	return &nodeRegistry{driver: d, clocks: map[string]*nodeClock{}}
}

func (r *nodeRegistry) forget(node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.clocks, node)
}

// Run registers and heartbeats the VMs' Nodes until ctx ends (nothing without a target cluster).
func (d *Driver) Run(ctx context.Context) {
	if d.config.Target == nil {
		<-ctx.Done()
		return
	}
	tick := time.NewTicker(d.config.Tick)
	defer tick.Stop()
	recovered := false
	for {
		if !recovered {
			if err := d.recoverVMs(ctx); err != nil {
				d.logger.Info("listing the registered nodes failed; retrying next round", "error", err)
			} else {
				recovered = true
			}
		}
		d.heartbeat(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// recoverVMs takes back the VMs whose Nodes this driver registered before it was restarted, as
// a cloud's VMs outlive the controller that created them: a restarted machine-controller (and
// the driver in its process) finds its machines' VMs and their heartbeats go on. A VM whose Node
// had not registered yet is lost with the process.
func (d *Driver) recoverVMs(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	nodes, err := d.config.Target.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: ManagedLabel + "=true"})
	if err != nil {
		return err
	}
	now := d.config.Now()
	recovered := 0
	for i := range nodes.Items {
		node := &nodes.Items[i]
		class, machine, ok := strings.Cut(strings.TrimPrefix(node.Spec.ProviderID, ProviderIDPrefix), "/")
		if !strings.HasPrefix(node.Spec.ProviderID, ProviderIDPrefix) || !ok || node.DeletionTimestamp != nil {
			continue
		}
		d.mu.Lock()
		_, exists := d.vms[machine]
		if !exists {
			d.vms[machine] = &VM{
				MachineName: machine,
				ClassName:   class,
				ProviderID:  node.Spec.ProviderID,
				NodeName:    node.Name,
				CreatedAt:   node.CreationTimestamp.Time,
				BootAt:      node.CreationTimestamp.Time,
			}
			recovered++
		}
		d.mu.Unlock()
		if exists {
			continue
		}
		readySince := now
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				readySince = c.LastTransitionTime.Time
			}
		}
		// Registered: the next round renews its Lease; its status is posted on the interval.
		d.nodes.update(node.Name, func(c *nodeClock) {
			c.registered, c.nodeUID, c.readySince, c.lastStatus = true, node.UID, readySince, now
		})
	}
	if recovered > 0 {
		d.logger.Info("took back the VMs of registered nodes", "vms", recovered)
	}
	return nil
}

// heartbeat runs one round: each due Node is registered, its Lease renewed and its status
// posted when their intervals passed. Calls run on a few workers so one slow call does not
// hold back the other Nodes.
func (d *Driver) heartbeat(ctx context.Context) {
	now := d.config.Now()
	work := make(chan VM)
	var wg sync.WaitGroup
	for range heartbeatWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for vm := range work {
				d.nodes.beat(ctx, vm, now)
			}
		}()
	}
	for _, vm := range d.dueNodes(now) {
		work <- vm
	}
	close(work)
	wg.Wait()
}

func (r *nodeRegistry) clock(node string) nodeClock {
	r.mu.Lock()
	defer r.mu.Unlock()
	if clock, ok := r.clocks[node]; ok {
		return *clock
	}
	return nodeClock{}
}

func (r *nodeRegistry) update(node string, change func(*nodeClock)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	clock, ok := r.clocks[node]
	if !ok {
		clock = &nodeClock{}
		r.clocks[node] = clock
	}
	change(clock)
}

func (r *nodeRegistry) beat(ctx context.Context, vm VM, now time.Time) {
	d := r.driver
	clock := r.clock(vm.NodeName)
	if !clock.registered {
		uid, err := r.register(ctx, vm, now)
		if err != nil {
			d.logger.Info("node registration failed; retrying next round", "node", vm.NodeName, "error", err)
			return
		}
		r.update(vm.NodeName, func(c *nodeClock) {
			c.registered, c.nodeUID, c.readySince, c.lastStatus = true, uid, now, now
		})
		clock = r.clock(vm.NodeName)
	}
	if now.Sub(clock.lastLease) >= d.config.LeaseInterval {
		if err := r.renewLease(ctx, vm, clock.nodeUID, now); err != nil {
			d.logger.Info("lease renewal failed; retrying next round", "node", vm.NodeName, "error", err)
		} else {
			r.update(vm.NodeName, func(c *nodeClock) { c.lastLease = now })
		}
	}
	if now.Sub(clock.lastStatus) >= d.config.StatusInterval {
		if err := r.postStatus(ctx, vm, clock.readySince, now); err != nil {
			d.logger.Info("node status post failed; retrying next round", "node", vm.NodeName, "error", err)
		} else {
			r.update(vm.NodeName, func(c *nodeClock) { c.lastStatus = now })
		}
	}
}

func readyCondition(since, now time.Time) corev1.NodeCondition {
	return corev1.NodeCondition{
		Type:               corev1.NodeReady,
		Status:             corev1.ConditionTrue,
		Reason:             "KubeletReady",
		Message:            "the in-memory provider's kubelet is posting ready status",
		LastHeartbeatTime:  metav1.NewTime(now),
		LastTransitionTime: metav1.NewTime(since),
	}
}

func (r *nodeRegistry) register(ctx context.Context, vm VM, now time.Time) (types.UID, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: vm.NodeName,
			Labels: map[string]string{
				"kubernetes.io/hostname": vm.NodeName,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
				ManagedLabel:             "true",
			},
		},
		Spec: corev1.NodeSpec{ProviderID: vm.ProviderID},
	}
	nodes := r.driver.config.Target.CoreV1().Nodes()
	created, err := nodes.Create(ctx, node, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		// Registered by an earlier run of ours: the status post below brings it up to date.
		created, err = nodes.Get(ctx, vm.NodeName, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("read the existing node: %w", err)
		}
	case err != nil:
		return "", fmt.Errorf("create the node: %w", err)
	}
	// A kubelet posts its status after registering (status is ignored on create).
	created.Status.Conditions = []corev1.NodeCondition{readyCondition(now, now)}
	created.Status.Addresses = nodeAddress(vm)
	if _, err := nodes.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return "", fmt.Errorf("post the node's first status: %w", err)
	}
	return created.UID, nil
}

func (r *nodeRegistry) postStatus(ctx context.Context, vm VM, since, now time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	condition := readyCondition(since, now)
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":%q,"reason":%q,"message":%q,"lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`,
		condition.Type, condition.Status, condition.Reason, condition.Message,
		now.UTC().Format(time.RFC3339), since.UTC().Format(time.RFC3339))
	_, err := r.driver.config.Target.CoreV1().Nodes().Patch(ctx, vm.NodeName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		// Deleted by someone while the VM runs: register it again, as a restarted kubelet would.
		r.update(vm.NodeName, func(c *nodeClock) { c.registered = false })
	}
	return err
}

func (r *nodeRegistry) renewLease(ctx context.Context, vm VM, nodeUID types.UID, now time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	leases := r.driver.config.Target.CoordinationV1().Leases(LeaseNamespace)
	renew := metav1.NewMicroTime(now)
	lease, err := leases.Get(ctx, vm.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		duration := int32(40)
		holder := vm.NodeName
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name:      vm.NodeName,
				Namespace: LeaseNamespace,
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: vm.NodeName, UID: nodeUID,
				}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       &holder,
				LeaseDurationSeconds: &duration,
				RenewTime:            &renew,
			},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &renew
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}
