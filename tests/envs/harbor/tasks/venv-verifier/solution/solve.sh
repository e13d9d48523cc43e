#!/bin/bash
echo forty-two > /app/answer.txt
