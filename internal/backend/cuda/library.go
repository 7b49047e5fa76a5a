package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ebitengine/purego"
)

// library is one dlopen'ed shared library.
type library struct {
	name   string // the name it was opened under
	handle uintptr
}

// symbol names one C entry point and the Go function variable it is bound to. name may list
// alternatives separated by '|', tried in order.
type symbol struct {
	ptr  any // pointer to a func variable
	name string
}

// fallbackDirs lists directories tried after the dynamic loader's own search (which honours
// LD_LIBRARY_PATH and the ld.so cache) failed: $CUDA_HOME/lib64, $CUDA_PATH/lib64 and the
// standard toolkit locations.
func fallbackDirs() []string {
	var dirs []string
	for _, env := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if v := os.Getenv(env); v != "" {
			dirs = append(dirs, filepath.Join(v, "lib64"), filepath.Join(v, "lib"))
		}
	}
	return append(dirs, "/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
		"/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu")
}

// openLibrary dlopens the first of names that loads, first by bare name (so LD_LIBRARY_PATH
// and the loader cache apply), then in the fallback directories. The error lists every
// attempt's reason.
func openLibrary(what string, names []string) (*library, error) {
	var reasons []string
	for _, n := range names {
		h, err := purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return &library{name: n, handle: h}, nil
		}
		reasons = append(reasons, err.Error())
	}
	for _, dir := range fallbackDirs() {
		for _, n := range names {
			p := filepath.Join(dir, n)
			if _, err := os.Stat(p); err != nil {
				continue
			}
			h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if err == nil {
				return &library{name: p, handle: h}, nil
			}
			reasons = append(reasons, err.Error())
		}
	}
	return nil, fmt.Errorf("%s %s not found: %s", what, strings.Join(names, ", "), strings.Join(reasons, "; "))
}

// bind resolves every symbol of syms in l and binds its Go function variable. A missing
// symbol is an error naming it; nothing panics.
func (l *library) bind(syms []symbol) error {
	var errs []error
	for _, s := range syms {
		var addr uintptr
		for _, name := range strings.Split(s.name, "|") {
			if a, err := purego.Dlsym(l.handle, name); err == nil && a != 0 {
				addr = a
				break
			}
		}
		if addr == 0 {
			errs = append(errs, fmt.Errorf("%s: symbol %s missing", l.name, s.name))
			continue
		}
		purego.RegisterFunc(s.ptr, addr)
	}
	return errors.Join(errs...)
}

// cString returns s as a NUL-terminated byte slice for C; keep it alive across the call.
func cString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}

// goString returns the bytes of b before its first NUL as a string.
func goString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}
