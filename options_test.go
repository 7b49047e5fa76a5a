package kvasir

import (
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

func TestParseDevice(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Device
		ok   bool
	}{
		{"", Device{}, true}, {"cpu", Device{}, true}, {"cuda", Device{CUDA: true}, true},
		{"cuda:0", Device{CUDA: true}, true}, {"cuda:3", Device{CUDA: true, Ordinal: 3}, true},
		{"cuda:", Device{}, false}, {"cuda:-1", Device{}, false}, {"cuda:01", Device{}, false},
		{"cuda:x", Device{}, false}, {"gpu", Device{}, false}, {"CPU", Device{}, false}, {"cuda:1:2", Device{}, false},
	} {
		got, err := ParseDevice(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseDevice(%q) = %+v, %v; want %+v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	for _, name := range []string{"cpu", "cuda", "cuda:7"} {
		d, err := ParseDevice(name)
		if err != nil || d.String() != name {
			t.Errorf("ParseDevice(%q).String() = %q, %v", name, d.String(), err)
		}
	}
}

// FuzzParseDevice: a device read back from its name is itself; nothing panics.
func FuzzParseDevice(f *testing.F) {
	for _, s := range []string{"cpu", "cuda", "cuda:1", "cuda:99999999999999999999", "cuda:+1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDevice(s)
		if err != nil {
			return
		}
		again, err := ParseDevice(d.String())
		if err != nil || again != d {
			t.Fatalf("ParseDevice(%q) = %+v, whose name %q reads as %+v, %v", s, d, d.String(), again, err)
		}
	})
}

func TestKVCacheDType(t *testing.T) {
	cpu, gpu := Device{}, Device{CUDA: true, Ordinal: 1}
	for _, tc := range []struct {
		name     string
		cpu, gpu quant.Type
		cpuOK    bool
		gpuOK    bool
	}{
		{"", quant.F32, quant.BF16, true, true}, {"auto", quant.F32, quant.BF16, true, true},
		{"f32", quant.F32, quant.F32, true, true}, {"f16", quant.F16, quant.F16, true, true}, {"bf16", 0, quant.BF16, false, true},
		{"fp8", quant.KVFP8E4M3, quant.KVFP8E4M3, true, true}, {"fp8_e4m3", quant.KVFP8E4M3, quant.KVFP8E4M3, true, true},
		{"fp8_e5m2", quant.KVFP8E5M2, quant.KVFP8E5M2, true, true},
		{"int8", quant.KVInt8, quant.KVInt8, true, true}, {"q8_0", quant.KVInt8, quant.KVInt8, true, true},
	} {
		dt, err := ParseKVCacheDType(tc.name)
		if err != nil {
			t.Fatalf("ParseKVCacheDType(%q): %v", tc.name, err)
		}
		if got, err := dt.On(gpu); (err == nil) != tc.gpuOK || (tc.gpuOK && got != tc.gpu) {
			t.Errorf("%q on a GPU: %v, %v; want %v", tc.name, got, err, tc.gpu)
		}
		got, err := dt.On(cpu)
		if (err == nil) != tc.cpuOK || (tc.cpuOK && got != tc.cpu) {
			t.Errorf("%q on the CPU: %v, %v; want %v (ok %v)", tc.name, got, err, tc.cpu, tc.cpuOK)
		}
	}
	for _, bad := range []string{"half", "F16", "FP8", "fp8_e4m3fnuz", "int4", "q4_0"} {
		if _, err := ParseKVCacheDType(bad); err == nil {
			t.Errorf("ParseKVCacheDType(%q) accepted", bad)
		}
	}
	if _, err := (KVCacheInt8 + 1).On(cpu); err == nil {
		t.Error("an unknown KV cache type is held on a GPU")
	}
}

// FuzzParseKVCacheDType: a type read back from its name is itself; nothing panics.
func FuzzParseKVCacheDType(f *testing.F) {
	for _, s := range []string{"auto", "f32", "f16", "bf16", "fp8", "fp8_e5m2", "q8_0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		dt, err := ParseKVCacheDType(s)
		if err != nil {
			return
		}
		if again, err := ParseKVCacheDType(dt.String()); err != nil || again != dt {
			t.Fatalf("ParseKVCacheDType(%q) = %v, whose name reads as %v, %v", s, dt, again, err)
		}
	})
}

func TestEnvOverrides(t *testing.T) {
	env := map[string]string{}
	get := func(k string) string { return env[k] }
	if got := withEnv(Options{CPUKernels: "avx2"}, get); got.CPUKernels != "avx2" || got.CUDA != (CUDAOptions{}) {
		t.Errorf("an empty environment changed the options: %+v", got)
	}
	env = map[string]string{EnvCPUKernels: "generic", EnvCPUWeights: "mmap", EnvCUDAOpTime: "1", EnvCUDAPDL: "0", EnvCUDAShadow: "0"}
	got := withEnv(Options{}, get)
	if got.CPUKernels != "generic" || !got.CPUWeightsInPlace || got.CUDA != (CUDAOptions{OpTime: true, DisablePDL: true, DisableShadows: true}) {
		t.Errorf("overrides not applied: %+v", got)
	}
	env = map[string]string{EnvCUDAQuant: "0", EnvCUDAGEMVQ: "split8", EnvCUDARepack: "0"}
	if got := withEnv(Options{}, get); got.CUDA != (CUDAOptions{WidenQuantized: true, QuantGEMV: "split8", KeepGGMLLayout: true}) {
		t.Errorf("quantization overrides not applied: %+v", got.CUDA)
	}
	// Values other than the documented ones leave the settings as they are.
	env = map[string]string{EnvCUDAOpTime: "yes", EnvCUDAPDL: "1", EnvCUDAShadow: "off", EnvCUDAQuant: "1", EnvCUDARepack: "1", EnvCPUWeights: "copy"}
	if got := withEnv(Options{}, get); got.CUDA != (CUDAOptions{}) || got.CPUWeightsInPlace {
		t.Errorf("undocumented values changed the options: %+v", got)
	}
}

// TestLoadCPU: Load makes the CPU backends itself, on the kernel set asked for (or the one
// KVASIR_CPU names), splits the threads among the ranks, and refuses a kernel set the CPU
// does not have.
func TestLoadCPU(t *testing.T) {
	p := testdata.Path(t, "models/stories260K/stories260K.bin")
	tok := testdata.Path(t, "models/stories260K/tok512.bin")
	load := func(opt Options) (*Loaded, error) {
		e, err := Open(p, opt)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { e.Close() })
		return e.Loaded(), nil
	}
	l, err := load(Options{Tokenizer: tok, Threads: 4, CPUKernels: "generic", TensorParallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	if l.Threads() != 2 || l.KernelSet() != "generic" || l.OnDevice() || l.Tokenizer() == nil {
		t.Errorf("threads %d, kernels %q, on device %v", l.Threads(), l.KernelSet(), l.OnDevice())
	}
	if bw := l.ProbeBandwidth(1 << 20); bw <= 0 {
		t.Errorf("bandwidth probe %v GB/s", bw)
	}
	t.Setenv(EnvCPUKernels, "generic")
	if l, err = load(Options{Tokenizer: tok, Threads: 1}); err != nil {
		t.Fatal(err)
	}
	if l.KernelSet() != "generic" {
		t.Errorf("KVASIR_CPU=generic: kernels %q", l.KernelSet())
	}
	t.Setenv(EnvCPUKernels, "no-such-set")
	if _, err := load(Options{Tokenizer: tok, Threads: 1}); err == nil || !strings.Contains(err.Error(), "no-such-set") {
		t.Errorf("an unknown kernel set: %v", err)
	}
}

// TestModelLimits: Options.ModelLimits reaches the model file's checks: stories260K's five
// layers pass the default limits and fail a limit of four.
func TestModelLimits(t *testing.T) {
	p := testdata.Path(t, "models/stories260K/stories260K.bin")
	tok := testdata.Path(t, "models/stories260K/tok512.bin")
	_, err := Open(p, Options{Tokenizer: tok, Threads: 1, ModelLimits: format.Limits{MaxLayers: 4}})
	if err == nil || !strings.Contains(err.Error(), "n_layers 5 exceeds the limit of 4 (format.Limits.MaxLayers)") {
		t.Errorf("MaxLayers 4: error %v, want the limit named", err)
	}
	e, err := Open(p, Options{Tokenizer: tok, Threads: 1, KVCacheMemory: 1 << 20, ModelLimits: format.Limits{MaxLayers: 5}})
	if err != nil {
		t.Fatalf("MaxLayers 5: %v", err)
	}
	e.Close()
}
