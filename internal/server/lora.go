package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/prometheus/client_golang/prometheus"
)

// adapterOf resolves a request's model field: the base model ("" or a served name, nil)
// or a loaded LoRA adapter; anything else is a 404 naming what is served.
func (s *Server) adapterOf(name string) (*kvasir.LoRAAdapter, *APIError) {
	if name == "" {
		return nil, nil
	}
	for _, n := range s.cfg.ModelNames {
		if n == name {
			return nil, nil
		}
	}
	if s.eng != nil {
		if a, ok := s.eng.LoRA(name); ok {
			return a, nil
		}
	}
	served := append([]string(nil), s.cfg.ModelNames...)
	if s.eng != nil {
		for _, a := range s.eng.LoRAs() {
			served = append(served, a.Name)
		}
	}
	return nil, notFound("model", "model_not_found", "the model `%s` does not exist: this server serves %s", name, strings.Join(served, ", "))
}

// responseModel is the model name a response reports: the adapter's when the request ran
// with one, else the served name.
func (s *Server) responseModel(a *kvasir.LoRAAdapter) string {
	if a != nil {
		return a.Name
	}
	return s.modelName()
}

// adapterName returns the adapter a model field names (nil: the base, or a name the
// request's validation refuses).
func (s *Server) adapterName(name string) *kvasir.LoRAAdapter {
	a, _ := s.adapterOf(name)
	return a
}

// loraCards are the /v1/models entries of the loaded adapters, each with the base model
// as its parent (vLLM's).
func (s *Server) loraCards() []modelCard {
	if s.eng == nil {
		return nil
	}
	var cards []modelCard
	for _, a := range s.eng.LoRAs() {
		c := s.card(a.Name)
		c.Root, c.Parent = a.Path, s.modelName()
		cards = append(cards, c)
	}
	return cards
}

// loraRequest is the body of vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter.
type loraRequest struct {
	LoRAName string `json:"lora_name"`
	LoRAPath string `json:"lora_path"`
}

// readLoRARequest decodes a load or unload body, refusing one without a name (and, to
// load, a path).
func (s *Server) readLoRARequest(w http.ResponseWriter, r *http.Request, needPath bool) (loraRequest, bool) {
	var req loraRequest
	unknown, apiErr := decodeBody(w, r, s.cfg.MaxBodyBytes, &req)
	switch {
	case apiErr != nil:
	case s.eng == nil || !s.eng.LoRAEnabled():
		apiErr = badRequest("", "LoRA is not enabled: start the server with --enable-lora (or --lora-modules)")
	case req.LoRAName == "":
		apiErr = badRequest("lora_name", "give lora_name")
	case needPath && req.LoRAPath == "":
		apiErr = badRequest("lora_path", "give lora_path")
	}
	if apiErr != nil {
		writeError(w, apiErr)
		return req, false
	}
	s.warnUnknown(r.URL.Path, unknown)
	return req, true
}

// handleLoadLoRA answers POST /v1/load_lora_adapter: read the adapter and serve it under
// its name.
func (s *Server) handleLoadLoRA(w http.ResponseWriter, r *http.Request) {
	req, ok := s.readLoRARequest(w, r, true)
	if !ok {
		return
	}
	for _, n := range s.cfg.ModelNames {
		if n == req.LoRAName {
			writeError(w, badRequest("lora_name", "`%s` is the base model's name", n))
			return
		}
	}
	if _, err := s.eng.LoadLoRA(req.LoRAName, req.LoRAPath); err != nil {
		if errors.Is(err, kvasir.ErrLoRAExists) {
			writeError(w, badRequest("lora_name", "the lora adapter '%s' has already been loaded", req.LoRAName))
			return
		}
		writeError(w, badRequest("lora_path", "%v", err))
		return
	}
	s.log.Info("loaded lora adapter", "name", req.LoRAName, "path", req.LoRAPath)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", req.LoRAName)
}

// handleUnloadLoRA answers POST /v1/unload_lora_adapter. Requests running with the
// adapter finish with it.
func (s *Server) handleUnloadLoRA(w http.ResponseWriter, r *http.Request) {
	req, ok := s.readLoRARequest(w, r, false)
	if !ok {
		return
	}
	if err := s.eng.UnloadLoRA(req.LoRAName); err != nil {
		writeError(w, notFound("lora_name", "model_not_found", "the lora adapter '%s' cannot be found", req.LoRAName))
		return
	}
	s.log.Info("unloaded lora adapter", "name", req.LoRAName)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", req.LoRAName)
}

// loraCollector reports vLLM's lora_requests_info at scrape time: a gauge set to the
// time of the scrape, labelled with the adapters of the running and the waiting requests
// (comma-separated) and the adapter slots.
type loraCollector struct {
	eng  *kvasir.Engine
	info *prometheus.Desc
}

func newLoRACollector(labels prometheus.Labels, eng *kvasir.Engine) *loraCollector {
	return &loraCollector{eng: eng, info: prometheus.NewDesc(MetricPrefix+"lora_requests_info", "Running stats on lora requests.",
		[]string{"running_lora_adapters", "waiting_lora_adapters", "max_lora"}, labels)}
}

// Describe sends the gauge's description.
func (c *loraCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.info }

// Collect sends the gauge.
func (c *loraCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.eng.Stats()
	ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, float64(time.Now().UnixNano())/1e9,
		strings.Join(st.RunningLoRAs, ","), strings.Join(st.WaitingLoRAs, ","), strconv.Itoa(c.eng.MaxLoRAs()))
}
