package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// csvColumn renders one column of `farm results --format csv` for a row.
type csvColumn func(r jobqueue.ExportRow) string

// defaultCSVColumns is the column list without --columns.
const defaultCSVColumns = "id,batch_id,state,url,final_url,status,title,data,error_class,error,attempts,node_id," +
	"created_at,started_at,finished_at,total_ms,links_over_limit"

func csvTime(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// csvResult renders a column of the result, or "" for a job without one.
func csvResult(f func(res *jobqueue.Result) string) csvColumn {
	return func(r jobqueue.ExportRow) string {
		if r.Result == nil {
			return ""
		}
		return f(r.Result)
	}
}

// csvColumns are the named columns; data.<path> columns are made by dataColumn.
var csvColumns = map[string]csvColumn{
	"id":               func(r jobqueue.ExportRow) string { return strconv.FormatInt(r.Job.ID, 10) },
	"batch_id":         func(r jobqueue.ExportRow) string { return r.Job.BatchID },
	"state":            func(r jobqueue.ExportRow) string { return string(r.Job.State) },
	"url":              func(r jobqueue.ExportRow) string { return r.Job.Spec.URL },
	"error_class":      func(r jobqueue.ExportRow) string { return r.Job.ErrorClass },
	"error":            func(r jobqueue.ExportRow) string { return r.Job.LastError },
	"attempts":         func(r jobqueue.ExportRow) string { return strconv.Itoa(r.Job.Attempts) },
	"node_id":          func(r jobqueue.ExportRow) string { return r.Job.NodeID },
	"created_at":       func(r jobqueue.ExportRow) string { return csvTime(&r.Job.CreatedAt) },
	"started_at":       func(r jobqueue.ExportRow) string { return csvTime(r.Job.StartedAt) },
	"finished_at":      func(r jobqueue.ExportRow) string { return csvTime(r.Job.FinishedAt) },
	"final_url":        csvResult(func(res *jobqueue.Result) string { return res.FinalURL }),
	"status":           csvResult(func(res *jobqueue.Result) string { return strconv.Itoa(res.Status) }),
	"title":            csvResult(func(res *jobqueue.Result) string { return res.Title }),
	"data":             csvResult(func(res *jobqueue.Result) string { return string(res.Data) }),
	"total_ms":         csvResult(func(res *jobqueue.Result) string { return strconv.FormatInt(res.Timings.TotalMS, 10) }),
	"links_over_limit": csvResult(func(res *jobqueue.Result) string { return strconv.Itoa(res.LinksOverLimit) }),
	"html_truncated":   csvResult(func(res *jobqueue.Result) string { return strconv.FormatBool(res.HTMLTruncated) }),
}

// parseCSVColumns turns --columns into column renderers, naming a bad column.
func parseCSVColumns(list string) ([]string, []csvColumn, error) {
	var names []string
	var cols []csvColumn
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		col, ok := csvColumns[name]
		if path, isData := strings.CutPrefix(name, "data."); isData {
			if path == "" || strings.Contains(path, "..") || strings.HasSuffix(path, ".") {
				return nil, nil, usagef("--columns: %q: name a field of the extracted data, like data.title or data.offer.price", name)
			}
			col, ok = dataColumn(strings.Split(path, ".")), true
		}
		if !ok {
			// The defaults' order first, then the rest: every column.
			known := strings.Split(defaultCSVColumns, ",")
			for _, c := range slices.Sorted(maps.Keys(csvColumns)) {
				if !slices.Contains(known, c) {
					known = append(known, c)
				}
			}
			return nil, nil, usagef("--columns: unknown column %q (known: %s, or data.<field>[.<field>…])", name, strings.Join(known, ", "))
		}
		names = append(names, name)
		cols = append(cols, col)
	}
	if len(cols) == 0 {
		return nil, nil, usagef("--columns: no columns given")
	}
	return names, cols, nil
}

// dataColumn renders one field of the extracted data, found by path (object
// keys, or array indexes): a string as it is, anything else as JSON, ""
// when the data has no such field.
func dataColumn(path []string) csvColumn {
	return csvResult(func(res *jobqueue.Result) string {
		if len(res.Data) == 0 {
			return ""
		}
		dec := json.NewDecoder(bytes.NewReader(res.Data))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil {
			return ""
		}
		for _, key := range path {
			switch x := v.(type) {
			case map[string]any:
				var ok bool
				if v, ok = x[key]; !ok {
					return ""
				}
			case []any:
				i, err := strconv.Atoi(key)
				if err != nil || i < 0 || i >= len(x) {
					return ""
				}
				v = x[i]
			default:
				return ""
			}
		}
		switch x := v.(type) {
		case nil:
			return ""
		case string:
			return x
		case json.Number:
			return x.String()
		default:
			b, err := json.Marshal(x)
			if err != nil {
				return fmt.Sprint(x)
			}
			return string(b)
		}
	})
}
