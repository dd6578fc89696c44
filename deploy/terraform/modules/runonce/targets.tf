# The grants of the jobs file's Google Cloud API targets (kind workflows, cloudrun,
# cloudbuild; pkg/targets): the worker's service account gets the roles each target
# needs, on the narrowest resource its API allows; deploy/deploy_test.go (TargetIAM)
# fails on a target without its grant or a grant without its target:
#
#   role                               on                                    calls
#   roles/workflows.invoker            the workflow (project-level grant,    executions.create, .list (label
#                                      IAM condition on the workflow's name) look-up), .get (wait)
#   roles/run.jobsExecutorWithOverrides the Cloud Run job                    jobs.run with env overrides
#   roles/run.viewer                   the Cloud Run job                     executions.get (wait), .list
#                                                                            (look-up after a crash)
#   roles/cloudbuild.builds.editor     the trigger's project (IAM condition  triggers.run, builds.get (wait)
#                                      on the trigger's name)
#
# Workflows and Cloud Build have no IAM resource below the project, so those grants are
# project-level, narrowed with an IAM condition on resource.name unless
# restrict_target_grants_to_resource is false. A Cloud Build trigger that runs as its own
# service account also needs roles/iam.serviceAccountUser for the worker on that
# account; grant it next to the trigger.

locals {
  # Only the kind and the resource of each target: these carry no secret, unlike an HTTP
  # target's headers, so they may leave the sensitive jobs file.
  targets = local.has_jobs ? nonsensitive({
    for name, j in jsondecode(var.jobs_json).jobs : name => { kind = j.kind, resource = j.resource }
    if contains(["workflows", "cloudrun", "cloudbuild"], lookup(j, "kind", "http"))
  }) : {}
  workflow_targets   = { for name, t in local.targets : name => t.resource if t.kind == "workflows" }
  cloudrun_targets   = { for name, t in local.targets : name => t.resource if t.kind == "cloudrun" }
  cloudbuild_targets = { for name, t in local.targets : name => t.resource if t.kind == "cloudbuild" }
}

resource "google_project_iam_member" "workflows_invoker_worker" {
  for_each = local.workflow_targets

  project = split("/", each.value)[1]
  role    = "roles/workflows.invoker"
  member  = google_service_account.worker.member

  dynamic "condition" {
    for_each = var.restrict_target_grants_to_resource ? [1] : []
    content {
      title      = "runonce-${each.key}"
      expression = "resource.name == \"${each.value}\" || resource.name.startsWith(\"${each.value}/\")"
    }
  }
}

resource "google_cloud_run_v2_job_iam_member" "jobs_executor_worker" {
  for_each = local.cloudrun_targets

  project  = split("/", each.value)[1]
  location = split("/", each.value)[3]
  name     = split("/", each.value)[5]
  role     = "roles/run.jobsExecutorWithOverrides"
  member   = google_service_account.worker.member
}

resource "google_cloud_run_v2_job_iam_member" "jobs_viewer_worker" {
  for_each = local.cloudrun_targets

  project  = split("/", each.value)[1]
  location = split("/", each.value)[3]
  name     = split("/", each.value)[5]
  role     = "roles/run.viewer"
  member   = google_service_account.worker.member
}

resource "google_project_iam_member" "builds_editor_worker" {
  for_each = local.cloudbuild_targets

  project = split("/", each.value)[1]
  role    = "roles/cloudbuild.builds.editor"
  member  = google_service_account.worker.member

  dynamic "condition" {
    for_each = var.restrict_target_grants_to_resource ? [1] : []
    content {
      title      = "runonce-${each.key}"
      expression = "resource.name == \"${each.value}\" || resource.name.startsWith(\"projects/${split("/", each.value)[1]}/locations/${split("/", each.value)[3]}/builds/\")"
    }
  }
}
