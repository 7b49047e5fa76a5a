package cuda

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// hostDefinitions replace the stubs' declarations of the built-ins the unit decoders call
// with plain host versions (a load is a load), so that their code can run on the CPU.
const hostDefinitions = `
template <typename T> T __ldg(const T* p) { return *p; }
float __int_as_float(int i) { union { int i; float f; } u; u.i = i; return u.f; }
float __uint_as_float(unsigned i) { union { unsigned i; float f; } u; u.i = i; return u.f; }
unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    unsigned long long v = x | ((unsigned long long)y << 32);
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
static float host_half(unsigned short h) { // IEEE half to float, as cvt.f32.f16 does
    unsigned e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? m * (1.f / 16777216.f) : (1.f + m / 1024.f);
    for (int x = (int)e - 15; e != 0 && x > 0; x--) v *= 2;
    for (int x = (int)e - 15; e != 0 && x < 0; x++) v /= 2;
    return (h >> 15) ? -v : v;
}
`

// TestUnitsOnHost runs the CUDA kernels' unit decoders (kernels/gemvq.cuh: every GEMV,
// dequantization and embedding kernel reads a weight only through them) on the CPU, built
// by the host C++ compiler, and checks every unit of random rows of each block type against
// the Go decoder: the GGML types on the file's bytes, Q8_0R and Q6_KR on the bytes Repack
// reorders. It needs no GPU, only g++ (CI installs it).
func TestUnitsOnHost(t *testing.T) {
	cxx := os.Getenv("CXX")
	if cxx == "" {
		cxx = "g++"
	}
	if _, err := exec.LookPath(cxx); err != nil {
		t.Skipf("no C++ compiler (%s) to run the kernels' decoders on the host", cxx)
	}
	stubs, err := os.ReadFile("../../../scripts/cuda_host_stubs.h")
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	for _, line := range strings.Split(string(stubs), "\n") {
		for _, name := range []string{"__ldg(", "__int_as_float(", "__uint_as_float(", "__byte_perm("} {
			if strings.Contains(line, name) {
				line = "" // defined below
			}
		}
		src.WriteString(line + "\n")
	}
	src.WriteString(hostDefinitions)
	for _, f := range []string{"kernels/common.cu", "kernels/gemvq.cuh", "testdata/units_host.cpp"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(b), `asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x));`, "f = host_half(v.x);")
		s = strings.NewReplacer("asm volatile(", "asm_(", "asm(", "asm_(").Replace(s)
		src.WriteString(s + "\n")
	}
	dir := t.TempDir()
	cpp, bin := filepath.Join(dir, "units.cpp"), filepath.Join(dir, "units")
	if err := os.WriteFile(cpp, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cxx, "-std=c++17", "-w", "-O1", "-o", bin, cpp).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cxx, err, out)
	}
	r := rand.New(rand.NewPCG(11, 12))
	const rows, k = 3, 4096
	for _, ty := range gemvqTypes {
		vals := randVals(r, rows*k, 1)
		rb, err := ty.qt.RowBytes(rows * k)
		if err != nil {
			t.Fatal(err)
		}
		raw := make([]byte, rb)
		if err := quant.Quantize(ty.qt, vals, raw); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, rows*k)
		if err := quant.Dequantize(ty.qt, raw, want); err != nil {
			t.Fatal(err)
		}
		if raw, err = Repack(ty.dt, Unpacked(ty.dt), raw, rows, k); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, ty.dt.String()+".bin")
		if err := os.WriteFile(file, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, ty.dt.String(), file, "3", "4096").Output()
		if err != nil {
			t.Fatalf("%s: the host decoder: %v", ty.dt, err)
		}
		got := make([]float32, len(out)/4)
		if len(got) != len(want) || binary.Read(bytes.NewReader(out), binary.LittleEndian, got) != nil {
			t.Fatalf("%s: %d values decoded, want %d", ty.dt, len(out)/4, len(want))
		}
		bad, scale := 0, 0.0
		for _, v := range want {
			scale = math.Max(scale, math.Abs(float64(v)))
		}
		for i := range got {
			if d := math.Abs(float64(got[i] - want[i])); !(d <= 1e-6*scale) {
				if bad < 3 {
					t.Errorf("%s: value %d (row %d) is %g, the Go decoder's %g", ty.dt, i, i/k, got[i], want[i])
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d values differ from the Go decoder's", ty.dt, bad, len(got))
		}
	}
}
