package hub

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// safetensorsIndex is the shard index of a sharded safetensors checkpoint.
const safetensorsIndex = "model.safetensors.index.json"

// companionFiles are the files taken beside *.safetensors when present in the repository:
// the model configuration, tokenizer and chat template, and a sentence-transformers
// model's pooling (an encoder's).
var companionFiles = []string{
	"config.json",
	"generation_config.json",
	"tokenizer.json",
	"tokenizer_config.json",
	"tokenizer.model",
	"special_tokens_map.json",
	"chat_template.jinja",
	"1_Pooling/config.json",
	safetensorsIndex,
}

// selection is the set of files Download fetches for a reference.
type selection struct {
	files  []string // repository paths to fetch, sorted
	target string   // the file path to return; "" returns the snapshot folder
	index  string   // a safetensors index whose weight_map narrows the shards, or ""
}

// splitGGUF matches the parts of a GGUF split by llama.cpp: NAME-00001-of-00003.gguf.
var splitGGUF = regexp.MustCompile(`^(.*)-(\d{5})-of-(\d{5})\.gguf$`)

// selectFiles decides what to fetch from a repository holding names:
//
//   - with file set: that file (and, for a part of a split GGUF, all its parts, returning
//     the first);
//   - else, when the top level holds *.safetensors: those with the config, tokenizer and
//     chat template files (not *.bin, *.pt, *.onnx, ...), returning the folder;
//   - else, when the repository holds exactly one GGUF model (ignoring mmproj* projector
//     files; a split GGUF counts as one): that model;
//   - else an error listing the GGUF models, asking for hf:ORG/REPO/FILE.
func selectFiles(ref Ref, names []string) (selection, error) {
	have := make(map[string]bool, len(names))
	for _, n := range names {
		have[n] = true
	}
	if ref.File != "" {
		if !have[ref.File] {
			return selection{}, fmt.Errorf("hub %s: file %q is not in the repository%s: %w", Prefix+ref.Repo, ref.File, listHint(names), ErrNotFound)
		}
		if m := splitGGUF.FindStringSubmatch(ref.File); m != nil {
			parts, err := splitParts(ref, have, m)
			if err != nil {
				return selection{}, err
			}
			return selection{files: parts, target: parts[0]}, nil
		}
		return selection{files: []string{ref.File}, target: ref.File}, nil
	}

	var weights []string
	for _, n := range names {
		if !strings.Contains(n, "/") && strings.HasSuffix(n, ".safetensors") {
			weights = append(weights, n)
		}
	}
	if len(weights) > 0 {
		sel := selection{files: weights}
		for _, c := range companionFiles {
			if have[c] {
				sel.files = append(sel.files, c)
			}
		}
		if have[safetensorsIndex] {
			sel.index = safetensorsIndex
		}
		slices.Sort(sel.files)
		return sel, nil
	}

	models := ggufModels(names)
	switch len(models) {
	case 0:
		return selection{}, fmt.Errorf("hub %s: no *.safetensors or *.gguf model files in the repository%s: %w", Prefix+ref.Repo, listHint(names), ErrNotFound)
	case 1:
		return selectFiles(Ref{Repo: ref.Repo, File: models[0], Revision: ref.Revision}, names)
	}
	var b strings.Builder
	for _, m := range models {
		fmt.Fprintf(&b, "\n  %s%s/%s", Prefix, ref.Repo, m)
	}
	return selection{}, fmt.Errorf("hub %s: the repository holds %d GGUF models; name one:%s\n%w", Prefix+ref.Repo, len(models), b.String(), ErrChoice)
}

// ggufModels lists the GGUF models among names: each plain .gguf file, and the first part
// of each split GGUF, leaving out multimodal projectors (mmproj*).
func ggufModels(names []string) []string {
	var models []string
	for _, n := range names {
		if !strings.HasSuffix(strings.ToLower(n), ".gguf") || strings.HasPrefix(strings.ToLower(path.Base(n)), "mmproj") {
			continue
		}
		if m := splitGGUF.FindStringSubmatch(n); m != nil && m[2] != "00001" {
			continue
		}
		models = append(models, n)
	}
	slices.Sort(models)
	return models
}

// splitParts lists all parts of the split GGUF that m (a splitGGUF match) belongs to,
// failing when one is missing from the repository.
func splitParts(ref Ref, have map[string]bool, m []string) ([]string, error) {
	total, err := strconv.Atoi(m[3])
	if err != nil || total < 1 {
		return nil, fmt.Errorf("hub %s: file %q: bad split count", Prefix+ref.Repo, m[0])
	}
	parts := make([]string, 0, total)
	for i := 1; i <= total; i++ {
		p := fmt.Sprintf("%s-%05d-of-%s.gguf", m[1], i, m[3])
		if !have[p] {
			return nil, fmt.Errorf("hub %s: split GGUF part %q is missing from the repository: %w", Prefix+ref.Repo, p, ErrNotFound)
		}
		parts = append(parts, p)
	}
	return parts, nil
}

// listHint names up to a few model files of the repository, to help fix a reference.
func listHint(names []string) string {
	var models []string
	for _, n := range names {
		if strings.HasSuffix(n, ".gguf") || strings.HasSuffix(n, ".safetensors") {
			models = append(models, n)
		}
	}
	if len(models) == 0 {
		return ""
	}
	slices.Sort(models)
	const most = 10
	more := ""
	if len(models) > most {
		more = fmt.Sprintf(", ... (%d more)", len(models)-most)
		models = models[:most]
	}
	return " (model files: " + strings.Join(models, ", ") + more + ")"
}

// applyIndex narrows sel to the shards that the safetensors index (its JSON content)
// names in its weight_map, checking that each is in the repository.
func applyIndex(ref Ref, sel selection, index []byte, have map[string]bool) (selection, error) {
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(index, &idx); err != nil {
		return sel, fmt.Errorf("hub %s: %s: %w", Prefix+ref.Repo, sel.index, err)
	}
	shards := map[string]bool{}
	for _, f := range idx.WeightMap {
		if err := checkFilePath(f); err != nil {
			return sel, fmt.Errorf("hub %s: %s: shard name: %w", Prefix+ref.Repo, sel.index, err)
		}
		if !have[f] {
			return sel, fmt.Errorf("hub %s: %s names shard %q that is not in the repository: %w", Prefix+ref.Repo, sel.index, f, ErrNotFound)
		}
		shards[f] = true
	}
	if len(shards) == 0 {
		return sel, nil
	}
	out := sel
	out.files = nil
	for _, f := range sel.files {
		if !strings.HasSuffix(f, ".safetensors") || shards[f] {
			out.files = append(out.files, f)
			delete(shards, f)
		}
	}
	for f := range shards { // shards in sub-folders
		out.files = append(out.files, f)
	}
	slices.Sort(out.files)
	return out, nil
}
