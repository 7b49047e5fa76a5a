package cuda

import (
	"fmt"
	"strings"
)

// NCCL holds the entry points of NVIDIA's collective communication library, bound from
// libnccl.so.2 with purego. It has no mutable state after OpenNCCL.
type NCCL struct {
	lib *library

	ncclGetVersion     func(v *int32) int32
	ncclCommInitAll    func(comms *uintptr, ndev int32, devlist *int32) int32
	ncclCommDestroy    func(comm uintptr) int32
	ncclCommAbort      func(comm uintptr) int32
	ncclAllReduce      func(send, recv uint64, count uint64, dtype, op int32, comm, stream uintptr) int32
	ncclSend           func(buf uint64, count uint64, dtype, peer int32, comm, stream uintptr) int32
	ncclRecv           func(buf uint64, count uint64, dtype, peer int32, comm, stream uintptr) int32
	ncclGroupStart     func() int32
	ncclGroupEnd       func() int32
	ncclGetErrorString func(r int32) *byte
	ncclGetLastError   func(comm uintptr) *byte

	// Version is NCCL's version code, e.g. 22703 for 2.27.3.
	Version int
}

// NCCL constants (nccl.h).
const (
	ncclInt32    = 2
	ncclFloat16  = 6
	ncclFloat32  = 7
	ncclBfloat16 = 9
	ncclSum      = 0
)

// ncclLibNames lists the names libnccl is looked up under, in order.
var ncclLibNames = []string{"libnccl.so.2", "libnccl.so"}

// OpenNCCL loads libnccl.so.2 and binds the calls the Communicator uses. Without the
// library it returns an error that says so ("cuda: NCCL (libnccl.so.2) not found: ...").
func OpenNCCL() (*NCCL, error) { return openNCCL(ncclLibNames) }

// openNCCL is OpenNCCL over the given library names.
func openNCCL(names []string) (*NCCL, error) {
	lib, err := openLibrary("NCCL", names)
	if err != nil {
		return nil, fmt.Errorf("cuda: NCCL (libnccl.so.2) not found: %w", err)
	}
	n := &NCCL{lib: lib}
	err = lib.bind([]symbol{
		{&n.ncclGetVersion, "ncclGetVersion"},
		{&n.ncclCommInitAll, "ncclCommInitAll"},
		{&n.ncclCommDestroy, "ncclCommDestroy"},
		{&n.ncclCommAbort, "ncclCommAbort"},
		{&n.ncclAllReduce, "ncclAllReduce"},
		{&n.ncclSend, "ncclSend"},
		{&n.ncclRecv, "ncclRecv"},
		{&n.ncclGroupStart, "ncclGroupStart"},
		{&n.ncclGroupEnd, "ncclGroupEnd"},
		{&n.ncclGetErrorString, "ncclGetErrorString"},
		{&n.ncclGetLastError, "ncclGetLastError"},
	})
	if err != nil {
		return nil, fmt.Errorf("cuda: NCCL %s: %w", lib.name, err)
	}
	var v int32
	if err := n.check("ncclGetVersion", n.ncclGetVersion(&v), 0); err != nil {
		return nil, err
	}
	n.Version = int(v)
	return n, nil
}

// check turns an ncclResult_t into nil or an *Error with NCCL's description and, when
// there is one, its last error message (comm may be 0).
func (n *NCCL) check(call string, r int32, comm uintptr) error {
	if r == 0 {
		return nil
	}
	names := []string{"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
		"ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress"}
	e := &Error{Call: call, Code: int(r), Name: fmt.Sprintf("ncclResult %d", r)}
	if int(r) < len(names) {
		e.Name = names[r]
	}
	msgs := []string{cGoString(n.ncclGetErrorString(r))}
	if last := cGoString(n.ncclGetLastError(comm)); last != "" {
		msgs = append(msgs, last)
	}
	e.Msg = strings.Join(msgs, ": ")
	return e
}

// ncclType maps a buffer dtype to NCCL's data type.
func ncclType(t DType) (int32, error) {
	switch t {
	case F32:
		return ncclFloat32, nil
	case F16:
		return ncclFloat16, nil
	case BF16:
		return ncclBfloat16, nil
	case I32:
		return ncclInt32, nil
	}
	return 0, fmt.Errorf("nccl: dtype %s is not supported", t)
}

// InitAll makes the communicators of a group of one rank per device ordinal in devs
// (ncclCommInitAll) into comms (len(devs) handles), on the calling device goroutine
// (inside dv's Do). ncclCommInitAll sets each member's device in turn on the calling thread
// and restores the thread's device afterwards; every rank runs on its device's primary
// context, which is what the CUDA runtime inside NCCL uses, so the contexts agree. dv's
// context is made current again anyway.
func (n *NCCL) InitAll(dv *Device, comms []uintptr, devs []int32) error {
	if len(comms) != len(devs) || len(devs) == 0 {
		return fmt.Errorf("nccl: %d communicators for %d devices", len(comms), len(devs))
	}
	r := n.ncclCommInitAll(&comms[0], int32(len(devs)), &devs[0])
	cerr := dv.drv.check("cuCtxSetCurrent", dv.drv.cuCtxSetCurrent(dv.ctx))
	if err := n.check("ncclCommInitAll", r, 0); err != nil {
		return err
	}
	return cerr
}

// AllReduceSum queues an in-place ncclAllReduce (sum, in buf's dtype) of buf over comm on
// dv's stream (inside dv's Do).
func (n *NCCL) AllReduceSum(dv *Device, buf Buffer, comm uintptr) error {
	dt, err := ncclType(buf.DType)
	if err != nil {
		return err
	}
	dv.seq++
	return n.check("ncclAllReduce", n.ncclAllReduce(buf.Ptr, buf.Ptr, uint64(buf.Len), dt, ncclSum, comm, dv.stream), comm)
}

// Send queues an ncclSend of buf to rank peer of comm on dv's stream (inside dv's Do).
func (n *NCCL) Send(dv *Device, buf Buffer, peer int, comm uintptr) error {
	dt, err := ncclType(buf.DType)
	if err != nil {
		return err
	}
	return n.check("ncclSend", n.ncclSend(buf.Ptr, uint64(buf.Len), dt, int32(peer), comm, dv.stream), comm)
}

// Recv queues an ncclRecv into buf from rank peer of comm on dv's stream (inside dv's Do).
func (n *NCCL) Recv(dv *Device, buf Buffer, peer int, comm uintptr) error {
	dt, err := ncclType(buf.DType)
	if err != nil {
		return err
	}
	dv.seq++
	return n.check("ncclRecv", n.ncclRecv(buf.Ptr, uint64(buf.Len), dt, int32(peer), comm, dv.stream), comm)
}

// GroupStart opens an NCCL group call (ncclGroupStart); comm names the communicator whose
// last error an error reports.
func (n *NCCL) GroupStart(comm uintptr) error {
	return n.check("ncclGroupStart", n.ncclGroupStart(), comm)
}

// GroupEnd closes an NCCL group call (ncclGroupEnd), launching the calls made since
// GroupStart; comm is as for GroupStart.
func (n *NCCL) GroupEnd(comm uintptr) error {
	return n.check("ncclGroupEnd", n.ncclGroupEnd(), comm)
}

// Abort aborts a communicator (ncclCommAbort), ending the NCCL work pending on it; it may
// be called from any goroutine.
func (n *NCCL) Abort(comm uintptr) { n.ncclCommAbort(comm) }

// Destroy destroys a communicator (ncclCommDestroy) after its work is done (inside the
// rank device's Do).
func (n *NCCL) Destroy(comm uintptr) error {
	return n.check("ncclCommDestroy", n.ncclCommDestroy(comm), 0)
}
