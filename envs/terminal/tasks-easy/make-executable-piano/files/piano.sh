echo piano
