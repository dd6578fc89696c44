// Package jobs reads the jobs file: the JSON file that names the jobs a deployment runs
// (-jobs). The ingress uses only the names (a job the file does not name gets 404); the
// worker calls each job's URL when no Go handler is registered for it, or, for a job of a
// Google Cloud API kind (KindWorkflows, KindCloudRun, KindCloudBuild; see Target and
// package targets), starts an execution of the resource it names.
//
// # Format
//
//	{
//	  "jobs": {
//	    "send-invoices": {
//	      "url": "https://billing.internal/run-invoices",
//	      "method": "POST",
//	      "timeout": "25m",
//	      "headers": {"X-Team": "billing"},
//	      "auth": "none",
//	      "max_attempts": 5
//	    },
//	    "nightly-etl": {
//	      "kind": "workflows",
//	      "resource": "projects/p/locations/us-central1/workflows/etl",
//	      "wait": true,
//	      "poll_interval": "10s"
//	    }
//	  }
//	}
//
// # Guarantees
//
// Load and Parse return either every job, validated, or an error naming the file, the
// job and the field at fault: unknown fields, a job name ValidName refuses, a URL that is
// not absolute http(s), an unknown method or auth, a timeout that is not a positive Go
// duration ("25m"; "1d" is not Go), a negative max_attempts, or a header the worker sets
// itself; for a Google Cloud API kind, a resource not of its API's form, an HTTP field, a
// field of another kind, or a plaintext endpoint off loopback.
package jobs
