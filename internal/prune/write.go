package prune

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/format"
)

// Write writes m to out, a GGUF file when out ends in ".gguf", else a Hugging Face folder,
// keeping each tensor's element type. Nothing partial is ever left at out: the GGUF writer
// renames a finished temporary file into place, and a folder is written beside out under a
// temporary name and renamed once complete (replacing a folder already at out).
func Write(m *format.Model, out string, progress func(done, total int64)) error {
	opt := format.ConvertOptions{Progress: progress}
	if strings.HasSuffix(out, ".gguf") {
		return format.Convert(m, out, opt)
	}
	out = filepath.Clean(out)
	if fi, err := os.Stat(out); err == nil && !fi.IsDir() {
		return fmt.Errorf("prune: output %s is a file: name a .gguf file or a folder", out)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // gone once renamed
	if err := format.Convert(m, tmp, opt); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(out); err == nil {
		old := tmp + ".old"
		if err := os.Rename(out, old); err != nil {
			return err
		}
		defer os.RemoveAll(old)
	}
	return os.Rename(tmp, out)
}
