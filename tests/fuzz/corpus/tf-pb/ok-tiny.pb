
	
aNoOp