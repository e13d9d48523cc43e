mkdir canyon
