"""What a run tells its operator: live progress, the run chart, the run records
(runs/<id>/), the summary, workspace stats."""
