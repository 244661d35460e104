"""From one window's stats to a verdict, the same in sidecar and fleet mode: assess (decide), its
memo (memo), the stated config's check (config_check), one route's evaluation with method
inference and the hold (evaluation), and the grading of applied advice (grading). Pure."""
