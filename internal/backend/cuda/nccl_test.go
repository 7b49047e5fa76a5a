package cuda

import (
	"strings"
	"testing"
)

func TestOpenNCCLMissing(t *testing.T) {
	_, err := openNCCL([]string{"libnccl-kvasir-absent.so.2"})
	if err == nil {
		t.Fatal("opening a library that does not exist succeeded")
	}
	if !strings.HasPrefix(err.Error(), "cuda: NCCL (libnccl.so.2) not found: ") {
		t.Fatalf("error %q does not say NCCL is missing", err)
	}
}

func TestNCCLType(t *testing.T) {
	for _, c := range []struct {
		dt   DType
		want int32
	}{{F32, ncclFloat32}, {F16, ncclFloat16}, {BF16, ncclBfloat16}, {I32, ncclInt32}} {
		got, err := ncclType(c.dt)
		if err != nil || got != c.want {
			t.Errorf("ncclType(%s) = %d, %v; want %d", c.dt, got, err, c.want)
		}
	}
	if _, err := ncclType(DType(99)); err == nil {
		t.Error("ncclType of an unknown dtype succeeded")
	}
}

func TestOpenNVMLMissing(t *testing.T) {
	_, err := openNVML([]string{"libnvidia-ml-kvasir-absent.so.1"})
	if err == nil || !strings.HasPrefix(err.Error(), "cuda: NVML (libnvidia-ml.so.1) not found: ") {
		t.Fatalf("opening a missing NVML: %v, want an error saying NVML is missing", err)
	}
}
