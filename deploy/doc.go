// Package deploy holds runonce's deployment: the Terraform module and example in
// terraform/, the local stack on the official emulators in local/, and the tools
// script; see README.md. The package has no code of its own: its tests are the checks
// that run in CI without a cloud account.
//
//   - The Terraform is parsed with hashicorp/hcl/v2 and the settings the guarantees need
//     are asserted: every Cloud Scheduler job sends an OIDC token with an explicit
//     audience; every subscription has a retry policy and a dead-letter policy (except
//     the one that keeps the dead letters); the subscription's message retention, the
//     scheduler's retry window and the longest lease fit inside the ledger's retention;
//     the TTL policy is set on expire_at for runs and not for effects (an effect must
//     outlive its run; the sweep deletes it after its run), and the rescue query's
//     index exists; the worker's CPU is always allocated with at least one instance and
//     its grace fits Cloud Run's 10 s; no account gets a role outside a short list, on
//     anything but the resource it needs; with a jobs file, the ingress reads one of
//     its own holding only the jobs' names and schedule fields (never a target or
//     header), and both binaries may read the Cloud Scheduler jobs it names; and every
//     RUNONCE_* variable names a real flag of the binary it is given to; every runbook
//     alert and dashboard chart exists and reads a metric the services or the binaries
//     really emit; every runonce command the runbook, the README and the guides in
//     docs/ show runs without a usage error. A self-test breaks a copy of the files in a temporary directory, one way
//     per check, and expects each check to catch it.
//   - Every block is checked against the google provider's own schema, extracted from
//     the npm package @cdktf/provider-google (generated from it) into testdata/:
//     unknown arguments and blocks, arguments written as blocks, missing required
//     ones, and a required_providers constraint that does not pin the version checked.
//   - terraform fmt -check, tflint (built-in terraform ruleset only, no plugin
//     downloads) and shellcheck run as subprocesses. Locally a missing tool skips its
//     test; with CI=true it fails (deploy/tools.sh installs them).
//   - The local stack (local/stack.sh) is started, one run is posted through the
//     ingress and seen completed by a worker, and the stack is stopped.
//
// RUNONCE_DEPLOY_TF_DIR points the Terraform checks at another tree (e.g. a copy being
// edited).
package deploy
