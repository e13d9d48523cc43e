#!/bin/bash
# pytest comes from a venv the image made (/opt/venv/bin is on PATH); its code is under
# /opt/venv/lib/python3.*/site-packages, outside /usr.
pytest /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
