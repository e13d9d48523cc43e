#!/bin/bash
# ANSWER_FILE comes from task.toml's [environment.env]
echo 42 > "$ANSWER_FILE"
